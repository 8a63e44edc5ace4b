//! `cellvisor mcp`: an MCP server on stdio, for agent desktops (DESIGN.md §1); `http`: the
//! same tools over MCP's streamable HTTP transport, served by the daemon at `/mcp`.
//!
//! The server embeds its own supervisor ([`Cellvisor::start`]); one MCP connection is one
//! session, named `mcp-<pid>`. Tools: `eval` (cells, DESIGN.md §2), `wait` and `terminate`
//! (cells that went to the background), `reset` and `sessions`; `state_tools`: `checkpoint`,
//! `restore`, `checkpoints` and `names`. While a cell runs, `hold` sends its output as
//! progress (`progress`) and interrupts it when the client cancels the call; `resources`
//! serves the session's spilled outputs as `cellvisor://artifact/<id>` resources.
//! When the client disconnects (or the process gets SIGTERM/SIGINT/SIGHUP) every worker is
//! stopped before [`serve_stdio`] returns.
//!
//! `framing` reads stdin (lines of at most 16 MiB, with `lines`, the reader the daemon's
//! socket shares) and answers every line rmcp could not (bad JSON, bad requests, lines over
//! the limit) with its JSON-RPC error, as the daemon does.
//!
//! stdout is the protocol: nothing else may write to it. Logging goes to stderr and workers
//! get `/dev/null` as their stdout.

mod args;
mod content;
mod framing;
mod hold;
pub mod http;
mod languages;
pub(crate) mod lines;
mod progress;
mod resources;
mod state_tools;
mod tools;
mod workspace_files;

use crate::render::StatusTable;
use args::{EvalArgs, ResetArgs, TerminateArgs, WaitArgs};
use cellvisor::cell::{EvalRequest, EvalResult};
use cellvisor::{Cellvisor, Options, RequestError, StartupError, WaitOptions};
use cellvisor_config::schema::CellsConfig;
use hold::{events_for, OnCancel};
use progress::Progress;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    Implementation, JsonObject, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer, ServiceExt};
use rmcp::transport::{StdioReader, StdioWriter};
use rmcp::ServerHandler;
use serde_json::Value;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::watch;
use tools::tools;

/// Why the MCP server could not run.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error(transparent)]
    Startup(#[from] StartupError),
    #[error("MCP handshake failed: {0}")]
    Initialize(String),
    #[error("the MCP service task failed: {0}")]
    Service(String),
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
}

/// Serves MCP on stdin/stdout until the client disconnects (or a termination signal), then
/// stops every worker.
pub async fn serve_stdio(options: Options) -> Result<(), McpError> {
    crate::allocator::map_big_blocks_separately();
    let cells = options.config.cells.clone();
    let cv = Arc::new(Cellvisor::start(options)?);
    let session = format!("mcp-{}", std::process::id());
    tracing::info!(%session, "MCP server on stdio");
    let (disconnected, on_disconnect) = watch::channel(false);
    let server = CellvisorMcp::new(Arc::clone(&cv), session, cells, on_disconnect);
    let result = run(server, disconnected).await;
    cv.shutdown().await;
    tracing::info!("MCP server stopped");
    result
}

async fn run(server: CellvisorMcp, disconnected: watch::Sender<bool>) -> Result<(), McpError> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(McpError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(McpError::Signals)?;
    let mut hup = signal(SignalKind::hangup()).map_err(McpError::Signals)?;
    let signalled = async {
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
            _ = hup.recv() => "SIGHUP",
        }
    };
    tokio::pin!(signalled);
    let running = tokio::select! {
        running = server.serve(stdio(disconnected)) => match running {
            Ok(running) => running,
            // The client went away before (or during) the handshake: nothing to serve.
            Err(rmcp::service::ServerInitializeError::ConnectionClosed(reason)) => {
                tracing::info!(%reason, "client disconnected before initializing");
                return Ok(());
            }
            Err(err) => return Err(McpError::Initialize(err.to_string())),
        },
        name = &mut signalled => {
            tracing::info!("{name}: stopping");
            return Ok(());
        }
    };
    let token = running.cancellation_token();
    let waiting = running.waiting();
    tokio::pin!(waiting);
    let quit = tokio::select! {
        quit = &mut waiting => quit,
        name = &mut signalled => {
            tracing::info!("{name}: stopping");
            token.cancel();
            waiting.await
        }
    };
    match quit {
        Ok(reason) => {
            tracing::debug!(?reason, "MCP connection ended");
            Ok(())
        }
        Err(err) => Err(McpError::Service(err.to_string())),
    }
}

/// stdin/stdout as the transport, framed by [`framing`] (every request gets an answer);
/// `disconnected` turns true when stdin ends, so running cells can be interrupted at once
/// instead of holding the shutdown up.
fn stdio(
    disconnected: watch::Sender<bool>,
) -> framing::LineTransport<NotifyEof<StdioReader>, StdioWriter> {
    let (reader, writer) = rmcp::transport::stdio_pipes();
    let reader = NotifyEof {
        inner: reader,
        eof: disconnected,
    };
    framing::LineTransport::new(reader, writer)
}

/// A reader that reports its end of file (or a read error) on a watch channel.
struct NotifyEof<R> {
    inner: R,
    eof: watch::Sender<bool>,
}

impl<R: AsyncRead + Unpin> AsyncRead for NotifyEof<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(result) = &poll {
            if result.is_err() || (buf.filled().len() == before && buf.remaining() > 0) {
                self.eof.send_replace(true);
            }
        }
        poll
    }
}

/// Resolves when the flag is (or turns) true; never if its sender is gone while false.
async fn until_true(mut flag: watch::Receiver<bool>) {
    if flag.wait_for(|set| *set).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The MCP handler: one connection, one session.
pub struct CellvisorMcp {
    cv: Arc<Cellvisor>,
    session: String,
    tools: Vec<Tool>,
    disconnected: watch::Receiver<bool>,
    artifacts: resources::Artifacts,
    /// The session's workspace, on a transport whose sessions work in one (HTTP): its
    /// files are resources, and a `cwd` names a directory inside it.
    workspace: Option<workspace_files::WorkspaceFiles>,
    /// Where its client is: MCP over HTTP is served on the network.
    origin: cellvisor::Origin,
}

impl CellvisorMcp {
    /// A handler for `session`; `disconnected` turning true interrupts running cells.
    pub fn new(
        cv: Arc<Cellvisor>,
        session: String,
        cells: CellsConfig,
        disconnected: watch::Receiver<bool>,
    ) -> CellvisorMcp {
        let tools = offered_tools(&cv, &cells);
        let artifacts = resources::Artifacts::new(cv.artifact_dir(), &session);
        CellvisorMcp {
            cv,
            session,
            tools,
            disconnected,
            artifacts,
            workspace: None,
            origin: cellvisor::Origin::Local,
        }
    }

    /// This handler's session works in its workspace (MCP over HTTP: a remote client): its
    /// files are resources, and its `cwd` names a directory inside it.
    pub fn in_workspace(mut self) -> CellvisorMcp {
        let workspace = cellvisor::SessionName::parse(&self.session)
            .ok()
            .map(|name| workspace_files::WorkspaceFiles::new(self.cv.workspace(&name)));
        self.workspace = workspace;
        self
    }

    /// This handler serves a client on the network (MCP over HTTP): the `landlock` level of
    /// `auto` confines its cells.
    pub fn on_network(mut self) -> CellvisorMcp {
        self.origin = cellvisor::Origin::Network;
        self
    }

    async fn eval(
        &self,
        arguments: JsonObject,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let EvalArgs {
            cells,
            cwd,
            request_id,
        } = match parse_cells(arguments) {
            Ok(parsed) => parsed,
            Err(message) => return tool_error(message),
        };
        let progress = Progress::for_request(context, cells.len());
        let (events, events_rx) = events_for(&progress);
        // Under `sessions.key = "session+cwd"` the state is the directory's: a call without
        // `cwd` names the server's own, where its cells run anyway.
        // A local server's cells run in its own directory, as they always did; a remote
        // client's in its workspace, or in the directory inside it that its `cwd` names.
        let cwd = match (cwd, &self.workspace) {
            (None, None) => std::env::current_dir().ok(),
            (Some(cwd), Some(_)) => {
                let inside = match cellvisor::SessionName::parse(&self.session) {
                    Ok(name) => self
                        .cv
                        .workspace_cwd(&name, &cwd)
                        .await
                        .map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                };
                match inside {
                    Ok(inside) => Some(inside),
                    Err(message) => return tool_error(message),
                }
            }
            (given, _) => given,
        };
        let request = EvalRequest {
            session: self.session.clone(),
            cwd,
            cells,
            tools: Vec::new(),
            request_id,
            ..Default::default()
        };
        // With a request_id it runs to its end even if the client goes away, for its retry.
        let eval = self.cv.eval_to_the_end(self.origin, request, events, None);
        // A cancelled call stops its cell, so the session is free for the next one.
        let result = self
            .hold(eval, events_rx, progress, context, OnCancel::Interrupt)
            .await;
        render_answer(result)
    }

    async fn reset(&self, arguments: JsonObject) -> CallToolResult {
        let args: ResetArgs = match tool_arguments(arguments, r#"{"language"?: "py"|"js"|"lua"}"#) {
            Ok(args) => args,
            Err(refusal) => return refusal,
        };
        let which = args
            .language
            .map(|l| format!("{} ", l.short_name()))
            .unwrap_or_default();
        match self.cv.reset(&self.session, args.language).await {
            Ok(0) => CallToolResult::success(vec![ContentBlock::text(format!(
                "No live {which}worker in this session: nothing to reset (the next cell starts \
                 with fresh state)."
            ))]),
            Ok(n) => CallToolResult::success(vec![ContentBlock::text(format!(
                "Reset {n} {which}worker{s}: their state is gone; the next cell starts fresh.",
                s = if n == 1 { "" } else { "s" }
            ))]),
            Err(err) => tool_error(request_error_message(&err)),
        }
    }

    /// `wait`: the output of a background cell since the last look, or its final result;
    /// what the cell prints meanwhile goes out as progress.
    async fn wait(
        &self,
        arguments: JsonObject,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let args: WaitArgs = match tool_arguments(
            arguments,
            r#"{"cell_id": integer, "yield_time_ms"?: integer, "max_tokens"?: integer}"#,
        ) {
            Ok(args) => args,
            Err(refusal) => return refusal,
        };
        let options = WaitOptions {
            yield_time_ms: args.yield_time_ms,
            max_tokens: args.max_tokens,
        };
        let progress = Progress::for_request(context, 1);
        let (events, events_rx) = events_for(&progress);
        let wait = self
            .cv
            .wait_with_events(&self.session, args.cell_id, options, events);
        // A cancelled wait leaves its cell running in the background, as `wait` found it.
        let waited = self
            .hold(wait, events_rx, progress, context, OnCancel::Leave)
            .await;
        render_answer(waited.map(|cell| EvalResult::from_cells(vec![cell])))
    }

    /// `terminate`: stop a background cell; its final result.
    async fn terminate(&self, arguments: JsonObject) -> CallToolResult {
        let args: TerminateArgs = match tool_arguments(arguments, r#"{"cell_id": integer}"#) {
            Ok(args) => args,
            Err(refusal) => return refusal,
        };
        render_answer(
            self.cv
                .terminate(&self.session, args.cell_id)
                .await
                .map(|cell| EvalResult::from_cells(vec![cell])),
        )
    }

    async fn sessions(&self) -> CallToolResult {
        match self.cv.status().await {
            Ok(rows) => {
                let table = StatusTable {
                    rows: &rows,
                    own: Some(&self.session),
                };
                CallToolResult::success(vec![ContentBlock::text(table.to_string())])
            }
            Err(err) => tool_error(request_error_message(&err)),
        }
    }
}

impl ServerHandler for CellvisorMcp {
    fn get_info(&self) -> ServerConfig {
        server_info()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        let result = match request.name.as_ref() {
            "eval" => self.eval(arguments, &context).await,
            "wait" => self.wait(arguments, &context).await,
            "terminate" => self.terminate(arguments).await,
            "reset" => self.reset(arguments).await,
            "sessions" => self.sessions().await,
            "checkpoint" => self.checkpoint(arguments).await,
            "restore" => self.restore(arguments).await,
            "checkpoints" => self.checkpoints().await,
            "names" => self.names(arguments).await,
            other => {
                return Err(ErrorData::invalid_params(
                    format!(
                        "unknown tool {other:?}: the tools are eval, wait, terminate, reset, \
                         sessions, checkpoint, restore, checkpoints and names"
                    ),
                    None,
                ))
            }
        };
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let mut listed = self.artifacts.list();
        if let Some(workspace) = &self.workspace {
            listed.extend(workspace.list().await);
        }
        Ok(ListResourcesResult::with_all_items(listed))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let mut templates = vec![resources::template()];
        if self.workspace.is_some() {
            templates.push(workspace_files::template());
        }
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let contents = match &self.workspace {
            Some(workspace) if workspace_files::WorkspaceFiles::names(&request.uri) => {
                workspace.read(&request.uri).await?
            }
            _ => self.artifacts.read(&request.uri)?,
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}

/// What the server says of itself at `initialize`, on every transport: tools, and the
/// session's artifacts as resources.
/// The tools under `cells` for the languages usable under `cv`'s configuration (each left
/// out is logged with why).
pub(super) fn offered_tools(cv: &Cellvisor, cells: &CellsConfig) -> Vec<Tool> {
    let (offered, left_out) = languages::usable(&cv.config_now());
    for why in left_out {
        tracing::info!("{why}");
    }
    tools(cells, &offered)
}

fn server_info() -> ServerConfig {
    let capabilities = ServerCapabilities::builder()
        .enable_tools()
        .enable_resources()
        .build();
    ServerConfig::new(capabilities)
        .with_server_info(Implementation::new("cellvisor", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
}

const INSTRUCTIONS: &str = "cellvisor runs Python, JavaScript and Lua code cells in persistent, \
supervised worker processes. Use `eval` to run code: variables, imports and functions persist \
per language across calls for this connection, so build on earlier cells instead of repeating \
them. A long cell can return early (its `yield_time_ms`, or `yield_control()` in the code) and \
go on in the background: collect the rest with `wait`, stop it with `terminate`. Use `reset` to \
start a language over, `sessions` to see the live workers. A cell's output past the result's \
limit is cut (head and tail kept); the whole of it is the resource \
`cellvisor://artifact/<id>` named by the result's `artifact://<id>`.";

fn parse_cells(arguments: JsonObject) -> Result<EvalArgs, String> {
    const SHAPE: &str = "Expected {\"cells\": [{\"language\": \"py\"|\"js\"|\"lua\", \"code\": \
                         string, \"title\"?: string, \"timeout\"?: number, \"reset\"?: bool, \
                         \"yield_time_ms\"?: integer}, ...], \
                         \"cwd\"?: string, \"request_id\"?: string}";
    let args: EvalArgs = serde_json::from_value(Value::Object(arguments))
        .map_err(|err| format!("invalid arguments: {err}. {SHAPE}"))?;
    if args.cells.is_empty() {
        return Err(format!("`cells` is empty: give at least one cell. {SHAPE}"));
    }
    // Timeouts and ids are checked with the request (`host::validate`), as every host's are.
    Ok(args)
}

fn request_error_message(err: &RequestError) -> String {
    match err {
        RequestError::NoCells => "`cells` is empty: give at least one cell".to_string(),
        other => other.to_string(),
    }
}

/// A tool's arguments as `T`, or the refusal that names what was wrong and the `expected`
/// shape, so every tool answers bad arguments in the same words.
fn tool_arguments<T: serde::de::DeserializeOwned>(
    arguments: JsonObject,
    expected: &str,
) -> Result<T, CallToolResult> {
    serde_json::from_value(Value::Object(arguments))
        .map_err(|err| tool_error(format!("invalid arguments: {err}. Expected {expected}")))
}

fn tool_error(message: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

/// The answer of `eval`, `wait` or `terminate`: the cells' result, or the refusal.
fn render_answer(answer: Result<EvalResult, RequestError>) -> CallToolResult {
    match answer {
        Ok(result) => content::render_result(&result),
        Err(err) => tool_error(request_error_message(&err)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cells_are_checked_with_messages_that_say_what_is_allowed() {
        let parse = |v: Value| parse_cells(v.as_object().cloned().unwrap_or_default());
        assert!(parse(json!({"cells": [{"language": "py", "code": "1"}]})).is_ok());
        let empty = parse(json!({"cells": []})).unwrap_err();
        assert!(empty.contains("at least one"), "{empty}");
        // Timeouts are the host's to check (`host::validate`), for every host alike.
        assert!(parse(json!({"cells": [{"language": "py", "code": "1", "timeout": 0}]})).is_ok());
        let language = parse(json!({"cells": [{"language": "rb", "code": "1"}]})).unwrap_err();
        assert!(language.contains("\"py\"|\"js\"|\"lua\""), "{language}");
        assert!(parse(json!({})).is_err());
    }
}
