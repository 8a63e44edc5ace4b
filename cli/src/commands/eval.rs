//! `cellvisor eval`: run cells and print their results.

use super::{usage_error, Globals};
use crate::render::{self, Shown};
use cellvisor::daemon::client::{Client, ClientError, Remote};
use cellvisor::daemon::protocol::code;
use cellvisor::{
    CellResult, CellSpec, CellStatus, Cellvisor, EvalRequest, EvalResult, Language, Options,
};
use std::io::{Read, Write};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// The code of one cell (or use --file / --cells; `-` reads it from stdin). Code that
    /// starts with `-` works as it is (`-l lua '-- a comment'`); after `--`, every argument
    /// is code.
    #[arg(allow_hyphen_values = true)]
    code: Option<String>,
    /// The cell's code after `--`, taken as it is even when it looks like an option.
    #[arg(last = true, value_name = "CODE", conflicts_with = "code")]
    code_after_separator: Option<String>,
    /// Language of the cell: py, js or lua.
    #[arg(short, long, default_value = "py")]
    language: String,
    /// Session whose state the cells use.
    #[arg(short, long, default_value = "default")]
    session: String,
    /// Read the cell's code from FILE.
    #[arg(short = 'f', long, conflicts_with_all = ["code", "code_after_separator"])]
    file: Option<PathBuf>,
    /// Read a JSON array of cells ({language, code, title?, timeout?, reset?}) from FILE, or `-` for stdin.
    #[arg(long, conflicts_with_all = ["code", "code_after_separator", "file"])]
    cells: Option<String>,
    /// Title of the cell.
    #[arg(long)]
    title: Option<String>,
    /// Timeout in seconds for each cell that does not set its own.
    #[arg(long)]
    timeout: Option<f64>,
    /// Return after MS milliseconds with the output so far while the cell goes on in the
    /// background (`cellvisor wait ID` collects the rest); for each cell that sets none.
    #[arg(long, value_name = "MS")]
    yield_time_ms: Option<u64>,
    /// Restart the language's worker before the first cell.
    #[arg(long)]
    reset: bool,
    /// Directory the cells run in (relative to the current one); default: the current one.
    #[arg(long)]
    cwd: Option<PathBuf>,
    /// Run on new workers discarded afterwards: no state from or for the session.
    #[arg(long)]
    fresh: bool,
    /// Name this request (1-128 printable ASCII characters): run again with the same id, it
    /// is answered with the first run's result instead of running twice.
    #[arg(long, value_name = "ID")]
    request_id: Option<String>,
    /// The session must exist (live, or saved in a snapshot): refuse instead of starting
    /// an empty one.
    #[arg(long, conflicts_with = "fresh")]
    resume: bool,
    /// Run the cells confined (the `[sandbox]` policy, on even where the config leaves it off).
    #[arg(long)]
    sandbox: bool,
    /// Print the whole structured result as JSON.
    #[arg(long)]
    json: bool,
    /// Run the cells in a supervisor inside this process instead of through the daemon
    /// (state then lasts only for this command).
    #[arg(long)]
    no_daemon: bool,
}

/// Bad input: printed as `error: ...`, exit status 2.
struct UsageError(String);

pub async fn run(args: EvalArgs, globals: &Globals) -> i32 {
    let request = match build_request(&args) {
        Ok(request) => request,
        Err(UsageError(message)) => return usage_error(message),
    };
    let remote = match globals.remote(Some(&args.session)) {
        Ok(remote) => remote,
        Err(code) => return code,
    };
    let config = match globals.load_config() {
        Ok(config) => config,
        Err(err) => return usage_error(err),
    };
    let result = if let Some(remote) = remote {
        if args.no_daemon {
            return usage_error(
                "--no-daemon runs the cells here and --connect (or $CELLVISOR_CONNECT) on a \
                 daemon elsewhere: give one of them",
            );
        }
        match for_remote(request, args.cwd.as_deref()) {
            Ok(request) => run_remotely(request, &remote).await,
            Err(UsageError(message)) => return usage_error(message),
        }
    } else if args.no_daemon {
        run_in_process(request, config).await
    } else {
        // The daemon's workers started from its environment: the cells see this caller's,
        // as the daemon's `[env]` rules pass it (the caller only keeps credentials back).
        let request = EvalRequest {
            env: Some(cellvisor::caller_environment(&config.env)),
            ..request
        };
        run_through_daemon(
            request,
            globals.socket(&config),
            globals.config_path(),
            config.daemon.log.clone(),
        )
        .await
    };
    match result {
        Ok(result) => {
            print_result(&result, args.json, &args.session);
            i32::from(result.is_error)
        }
        Err(Failure::Refused(message)) => usage_error(message),
        Err(Failure::Broken(message)) => {
            eprintln!("error: {message}");
            1
        }
    }
}

/// Why no result came back: the request was refused (bad input), or something broke.
enum Failure {
    Refused(String),
    Broken(String),
}

async fn run_in_process(
    request: EvalRequest,
    config: cellvisor::Config,
) -> Result<EvalResult, Failure> {
    let cellvisor = Cellvisor::start(Options {
        config,
        worker_exe: None,
        runtime_dir: None,
    })
    .map_err(|e| Failure::Broken(e.to_string()))?;
    let session = request.session.clone();
    let result = match cellvisor.eval(request, None).await {
        Ok(mut result) => {
            // Its cells would die with this process: a background cell is waited out here.
            for cell in result.cells.iter_mut() {
                finish_in_process(&cellvisor, &session, cell).await;
            }
            Ok(EvalResult::from_cells(result.cells))
        }
        Err(err) => Err(err),
    };
    cellvisor.shutdown().await;
    result.map_err(|e| Failure::Refused(e.to_string()))
}

/// Waits for `cell` until it ends if it went to the background, adding what it printed.
async fn finish_in_process(cellvisor: &Cellvisor, session: &str, cell: &mut CellResult) {
    while cell.report.status == CellStatus::Running {
        match cellvisor
            .wait(session, cell.cell_id, cellvisor::WaitOptions::default())
            .await
        {
            Ok(more) => {
                cell.report.output.push_str(&more.report.output);
                cell.report.displays.extend(more.report.displays);
                cell.report.status_events.extend(more.report.status_events);
                cell.report.status = more.report.status;
                cell.exit_code = more.exit_code;
                cell.report.duration_ms = more.report.duration_ms;
            }
            Err(err) => {
                cell.report.output.push_str(&format!("{err}\n"));
                cell.report.status = CellStatus::Error;
                cell.exit_code = 1;
            }
        }
    }
}

/// `request` for a daemon on another machine: this machine's directory and `VIRTUAL_ENV`
/// mean nothing there, so the cells run in the workers' directory unless `--cwd` names one
/// of the daemon's (absolute, since it is not relative to anything here).
fn for_remote(
    mut request: EvalRequest,
    cwd: Option<&std::path::Path>,
) -> Result<EvalRequest, UsageError> {
    request.virtual_env = None;
    request.cwd = match cwd {
        None => None,
        Some(dir) if dir.is_absolute() => Some(dir.to_path_buf()),
        Some(dir) => {
            return Err(UsageError(format!(
                "with --connect, --cwd names a directory on the daemon's machine and must be \
                 absolute (not {})",
                dir.display()
            )))
        }
    };
    Ok(request)
}

/// Runs `request` on the remote daemon; nothing is started for it.
async fn run_remotely(request: EvalRequest, remote: &Remote) -> Result<EvalResult, Failure> {
    let mut client = Client::connect_remote(remote)
        .await
        .map_err(|e| Failure::Broken(super::target::describe(&e)))?;
    run_on(&mut client, &request).await
}

/// Runs `request` on a connected daemon.
async fn run_on(client: &mut Client, request: &EvalRequest) -> Result<EvalResult, Failure> {
    client.eval(request, |_| {}).await.map_err(|err| match err {
        ClientError::Rpc(error) if error.code != code::SHUTTING_DOWN => {
            Failure::Refused(error.message)
        }
        other => Failure::Broken(other.to_string()),
    })
}

async fn run_through_daemon(
    request: EvalRequest,
    socket: PathBuf,
    config: Option<PathBuf>,
    log: Option<PathBuf>,
) -> Result<EvalResult, Failure> {
    // This program is the cellvisor binary: the daemon it starts is itself, serving.
    let program = std::env::current_exe()
        .map_err(|e| Failure::Broken(format!("cannot find this program to start a daemon: {e}")))?;
    let mut client = Client::connect_or_start(&socket, &program, config.as_deref(), log.as_deref())
        .await
        .map_err(|e| Failure::Broken(e.to_string()))?;
    run_on(&mut client, &request).await
}

fn build_request(args: &EvalArgs) -> Result<EvalRequest, UsageError> {
    let language: Language = args
        .language
        .parse()
        .map_err(|e: cellvisor_ipc::message::UnknownLanguage| UsageError(e.to_string()))?;
    let mut cells = if let Some(source) = &args.cells {
        parse_cells(source)?
    } else {
        let code = match (&args.code, &args.file) {
            (None, None) if args.code_after_separator.is_some() => {
                args.code_after_separator.clone().unwrap_or_default()
            }
            (Some(code), _) if code == "-" => read_stdin()?,
            (Some(code), _) if looks_like_an_option(code) => {
                return Err(UsageError(format!(
                    "unknown option `{code}`; code that looks like an option goes after `--`: \
                     cellvisor eval -l lua -- '{code}'"
                )))
            }
            (Some(code), _) => code.clone(),
            (None, Some(file)) => std::fs::read_to_string(file).map_err(|e| {
                UsageError(format!("cannot read code file {}: {e}", file.display()))
            })?,
            (None, None) => {
                return Err(UsageError(
                    "no code given: pass it as an argument, with --file FILE, or --cells FILE"
                        .into(),
                ))
            }
        };
        vec![CellSpec {
            language,
            code,
            title: args.title.clone(),
            timeout: None,
            reset: false,
            yield_time_ms: None,
        }]
    };
    // Checked with the request (`host::validate`), as every host's timeouts are.
    if let Some(ms) = args.yield_time_ms {
        for cell in cells.iter_mut().filter(|c| c.yield_time_ms.is_none()) {
            cell.yield_time_ms = Some(ms);
        }
    }
    if let Some(timeout) = args.timeout {
        for cell in cells.iter_mut().filter(|c| c.timeout.is_none()) {
            cell.timeout = Some(timeout);
        }
    }
    if args.reset {
        if let Some(first) = cells.first_mut() {
            first.reset = true;
        }
    }
    Ok(EvalRequest {
        session: args.session.clone(),
        cwd: Some(request_cwd(args.cwd.as_deref())?),
        cells,
        tools: Vec::new(),
        virtual_env: std::env::var_os("VIRTUAL_ENV")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from),
        env: None,
        fresh: args.fresh,
        resume: args.resume,
        request_id: args.request_id.clone(),
        timeout: None,
        reset: false,
        // The CLI shows the cells' progress as it comes.
        events: cellvisor_client::protocol::Events::All,
        sandbox: args
            .sandbox
            .then(|| cellvisor_client::sandbox::SandboxRequest {
                enabled: Some(true),
                ..Default::default()
            }),
    })
}

/// A lone word like `--flag` or `-x` is a mistyped option rather than code (code that
/// starts with `-`, like a Lua comment, has a space or a line after it).
fn looks_like_an_option(code: &str) -> bool {
    let word = code.trim_start_matches('-');
    code.starts_with('-')
        && code.len() - word.len() <= 2
        && word.starts_with(|c: char| c.is_ascii_alphabetic())
        && !code.contains(char::is_whitespace)
}

/// The directory the cells run in, absolute: the daemon runs elsewhere, so the caller's own
/// directory (and `--cwd` resolved against it) travels with the request.
fn request_cwd(given: Option<&std::path::Path>) -> Result<PathBuf, UsageError> {
    let here = std::env::current_dir()
        .map_err(|e| UsageError(format!("cannot read the current directory: {e}")))?;
    Ok(match given {
        Some(dir) => here.join(dir),
        None => here,
    })
}

fn read_stdin() -> Result<String, UsageError> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| UsageError(format!("cannot read stdin: {e}")))?;
    Ok(text)
}

fn parse_cells(source: &str) -> Result<Vec<CellSpec>, UsageError> {
    let (text, name) = if source == "-" {
        (read_stdin()?, "stdin".to_string())
    } else {
        let text = std::fs::read_to_string(source)
            .map_err(|e| UsageError(format!("cannot read cells file {source}: {e}")))?;
        (text, source.to_string())
    };
    let cells: Vec<CellSpec> = serde_json::from_str(&text).map_err(|e| {
        UsageError(format!(
            "malformed cells in {name}: {e}; expected a JSON array of \
             {{\"language\": \"py\"|\"js\"|\"lua\", \"code\": \"...\", \"title\"?, \"timeout\"?, \"reset\"?}}"
        ))
    })?;
    if cells.is_empty() {
        return Err(UsageError(format!("{name} holds no cells")));
    }
    Ok(cells)
}

/// Prints a request's result: `--json` as is, else each cell's output on stdout (stderr for a
/// failed cell), notes on stderr, displays as text or saved files.
pub(super) fn print_result(result: &EvalResult, json: bool, session: &str) {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if json {
        let _ = serde_json::to_writer_pretty(&mut out, result);
        let _ = writeln!(out);
        return;
    }
    let total = result.cells.len();
    for cell in &result.cells {
        print_cell(&mut out, cell, total);
        if cell.report.status == CellStatus::Running {
            let _ = out.flush();
            eprintln!(
                "{}",
                super::background::still_running(cell.cell_id, session)
            );
        }
    }
    let _ = out.flush();
    if let Some(failed) = result.failed_cell.as_ref().filter(|_| total > 1) {
        eprintln!("{}", failed.summary_line(&result.cells));
    }
}

fn print_cell(out: &mut impl Write, cell: &CellResult, total: usize) {
    if let Some(notice) = &cell.report.notice {
        eprintln!("note: {notice}");
    }
    if let Some(header) = render::cell_header(cell, total) {
        if cell.report.status == CellStatus::Skipped {
            eprintln!("{header} ({})", cell.report.status);
            eprint!("{}", cell.report.output);
            return;
        }
        let _ = writeln!(out, "{header}");
    }
    if let Some(placeholder) = render::placeholder(cell) {
        // On stderr: stdout holds only what the cells gave, for pipes and files.
        let _ = out.flush();
        eprintln!("{placeholder}");
    } else if !cell.report.status.failed() {
        let _ = out.write_all(cell.report.output.as_bytes());
    } else {
        let _ = out.flush();
        eprint!("{}", cell.report.output);
    }
    if let Some(note) = render::truncation_note(cell) {
        let _ = out.flush();
        eprintln!("{note}");
    }
    if let Some(note) = render::processes_ended_note(cell) {
        let _ = out.flush();
        eprintln!("{note}");
    }
    if let Some(note) = render::out_of_memory_note(cell) {
        let _ = out.flush();
        eprintln!("{note}");
    }
    for bundle in cell.displays_beyond_output() {
        match render::display(bundle) {
            Shown::Text(text) => {
                let _ = writeln!(out, "{text}");
            }
            Shown::Media { mime, base64, .. } => {
                let _ = writeln!(out, "{}", save_media(mime, &base64));
            }
            Shown::Nothing => {}
        }
    }
}

/// An image or audio display on a terminal: saved to a file, and a line saying where.
fn save_media(mime: &str, base64_data: &str) -> String {
    let extension = match mime.rsplit_once('/') {
        Some((_, "jpeg")) => "jpg",
        Some((_, "svg+xml")) => "svg",
        Some((_, subtype)) => subtype,
        None => "bin",
    };
    match save_file(base64_data, extension) {
        Ok((path, bytes)) => format!(
            "[{mime}, {}, saved to {}]",
            bytesize::ByteSize::b(bytes),
            path.display()
        ),
        Err(err) => format!("[{mime} not saved: {err}]"),
    }
}

/// Decodes base64 media into `images/` of the runtime directory; answers its path and size.
fn save_file(base64_data: &str, extension: &str) -> Result<(PathBuf, u64), String> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(base64_data.trim())
        .map_err(|e| format!("not base64: {e}"))?;
    let dir = cellvisor_ipc::socket::default_runtime_dir().join("images");
    cellvisor_ipc::socket::ensure_private_dir(&dir).map_err(|e| e.to_string())?;
    let file = tempfile::Builder::new()
        .prefix("display-")
        .suffix(&format!(".{extension}"))
        .tempfile_in(&dir)
        .map_err(|e| e.to_string())?;
    std::fs::write(file.path(), &bytes).map_err(|e| e.to_string())?;
    let (_, path) = file.keep().map_err(|e| e.to_string())?;
    Ok((path, bytes.len() as u64))
}
