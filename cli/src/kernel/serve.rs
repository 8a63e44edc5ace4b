//! The kernel's five channels on one thread: shell (one request at a time, in order), control
//! (answered at once, even while a cell runs), iopub (every message a task writes, in order),
//! heartbeat (echo) and stdin (bound; input is never asked for). A message whose signature
//! is not the connection key's, or was read before, is logged and dropped; a peer whose
//! message grows past [`MAX_MESSAGE`] is dropped; the kernel goes on serving. It ends on a
//! `shutdown_request`, on SIGTERM, or when the process that started it is gone, even while a
//! cell runs.

use super::connection::ConnectionFile;
use super::session::{Interrupter, Session};
use crate::jupyter::history::History;
use crate::jupyter::mapping;
use crate::jupyter::message::Outgoing;
use crate::jupyter::traceback::Outputs;
use crate::jupyter::wire::{self, Incoming, Reader, Signer};
use crate::jupyter::{shell, snippets};
use bytes::Bytes;
use serde_json::{json, Value};
use std::time::{Instant, SystemTime};
use tokio::sync::{mpsc, watch};
use zeromq::{Socket, SocketOptions, SocketRecv, SocketSend, ZmqMessage};

/// How long the sockets' writers get to flush the last replies before the process ends (as
/// ZeroMQ's linger).
const LINGER: std::time::Duration = std::time::Duration::from_millis(100);

/// The largest message a peer may send on any channel before it is dropped: a cell's code
/// is far smaller, and without a bound one frame header claiming terabytes would make the
/// kernel reserve them.
pub const MAX_MESSAGE: usize = 64 << 20;

/// Requests read ahead of the one being answered, per channel; past it the channel is not
/// read (its peers wait) until one is answered.
const BACKLOG: usize = 256;

/// Why the kernel could not serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A channel's port could not be bound.
    #[error("cannot bind the {channel} channel to {endpoint}: {why}")]
    Bind {
        channel: &'static str,
        endpoint: String,
        why: String,
    },
}

/// What every task of the kernel shares: how to sign, and where iopub messages go.
#[derive(Clone)]
struct Wire {
    signer: Signer,
    /// The `session` of the headers this kernel writes.
    session: String,
    iopub: mpsc::UnboundedSender<Outgoing>,
}

impl Wire {
    fn publish(&self, msg_type: &str, parent: &Value, content: Value) {
        let _ = self
            .iopub
            .send(Outgoing::new("iopub", msg_type, parent, content));
    }

    fn status(&self, parent: &Value, state: &str) {
        self.publish("status", parent, json!({"execution_state": state}));
    }

    /// The frames of a reply to `to` on its channel.
    fn reply(&self, to: &Incoming, msg_type: &str, content: Value) -> ZmqMessage {
        let channel = if to.request.channel == "control" {
            "control"
        } else {
            "shell"
        };
        let message = Outgoing::new(channel, msg_type, &to.request.header, content);
        frames(wire::encode(&to.ids, &message, &self.session, &self.signer))
    }
}

/// Every socket's options: [`MAX_MESSAGE`].
fn options() -> SocketOptions {
    let mut options = SocketOptions::default();
    options.max_message_size(MAX_MESSAGE);
    options
}

fn frames(parts: Vec<Bytes>) -> ZmqMessage {
    // Never empty: a message has its delimiter, signature and four parts.
    ZmqMessage::try_from(parts).unwrap_or_else(|_| ZmqMessage::from(Vec::<u8>::new()))
}

async fn bind<S: Socket>(
    socket: &mut S,
    file: &ConnectionFile,
    port: u16,
    channel: &'static str,
) -> Result<(), ServeError> {
    let endpoint = file.endpoint(port);
    socket
        .bind(&endpoint)
        .await
        .map(|_| ())
        .map_err(|e| ServeError::Bind {
            channel,
            endpoint,
            why: e.to_string(),
        })
}

/// The tasks a request passes through between the shell's TCP socket and the shell's queue
/// (ZeroMQ's peer task, its socket's queue, the reader), each given a turn before a failed
/// execution's reply goes out, so that what a client sent before it is queued by then.
const READER_HOPS: usize = 4;

/// Why the kernel ends.
pub type Ending = watch::Sender<Option<bool>>;

/// Serves the kernel until a `shutdown_request` or until `ending` is told (`Some(restart)`),
/// then closes the session if it is the kernel's own.
pub async fn serve(
    file: ConnectionFile,
    mut session: Session,
    ending: Ending,
) -> Result<(), ServeError> {
    let mut shell = zeromq::RouterSocket::with_options(options());
    let mut control = zeromq::RouterSocket::with_options(options());
    let mut stdin = zeromq::RouterSocket::with_options(options());
    let mut iopub = zeromq::PubSocket::with_options(options());
    let mut heartbeat = zeromq::RepSocket::with_options(options());
    bind(&mut shell, &file, file.shell_port, "shell").await?;
    bind(&mut control, &file, file.control_port, "control").await?;
    bind(&mut stdin, &file, file.stdin_port, "stdin").await?;
    bind(&mut iopub, &file, file.iopub_port, "iopub").await?;
    bind(&mut heartbeat, &file, file.hb_port, "heartbeat").await?;

    let (iopub_tx, iopub_rx) = mpsc::unbounded_channel();
    let wire = Wire {
        signer: Signer::new(&file.key),
        session: uuid::Uuid::new_v4().to_string(),
        iopub: iopub_tx,
    };
    let publisher = tokio::spawn(publish(
        iopub,
        iopub_rx,
        wire.signer.clone(),
        wire.session.clone(),
    ));
    tokio::spawn(echo(heartbeat));
    let shutdown_tx = ending;
    let mut shutdown = shutdown_tx.subscribe();
    let reader = Reader::new(wire.signer.clone());
    let (shell_out, shell_in) = shell.split();
    let (jobs_tx, mut jobs) = mpsc::channel(BACKLOG);
    tokio::spawn(read(shell_in, "shell", reader.clone(), jobs_tx));
    let controller = Control {
        reader,
        wire: wire.clone(),
        interrupter: session.interrupter(),
        language: session.language,
        shutdown: shutdown_tx.clone(),
    };
    let controller = tokio::spawn(controller.serve(control));
    wire.status(&json!({}), "starting");
    wire.status(&json!({}), "idle");

    let mut shell = Shell {
        wire: wire.clone(),
        out: shell_out,
        count: 0,
        history: History::default(),
        shutdown: shutdown_tx,
        values_asked: false,
        replied: None,
    };
    let ended = |s: &Option<bool>| s.is_some();
    loop {
        let job = tokio::select! {
            job = jobs.recv() => match job { Some(job) => job.incoming, None => break },
            _ = shutdown.wait_for(ended) => break,
        };
        // The kernel ends even while a cell runs: the cell is left to the session's close
        // (its own session) or to the session (an attached one).
        let failed = tokio::select! {
            failed = shell.handle(&mut session, &job) => failed,
            _ = shutdown.wait_for(ended) => {
                session.abandon();
                break;
            }
        };
        if failed {
            // As ipykernel: an error aborts the execute requests already queued when its
            // reply went out; what came after it runs.
            let replied = shell.replied;
            while let Ok(queued) = jobs.try_recv() {
                let before_reply = replied.is_some_and(|reply| reply.came_after(&queued));
                if before_reply && queued.incoming.request.msg_type == "execute_request" {
                    shell.abort(&queued.incoming).await;
                } else {
                    shell.handle(&mut session, &queued.incoming).await;
                }
            }
        }
        if shutdown.borrow().is_some() {
            break;
        }
    }
    session.close_if_own().await;
    // The publisher ends once every task that publishes has let go of it.
    controller.abort();
    let _ = controller.await;
    drop(shell);
    drop(wire);
    // Every message published so far goes out before the process ends.
    let _ = publisher.await;
    tokio::time::sleep(LINGER).await;
    drop(stdin);
    Ok(())
}

/// Writes iopub's messages in the order the tasks published them.
async fn publish(
    mut socket: zeromq::PubSocket,
    mut messages: mpsc::UnboundedReceiver<Outgoing>,
    signer: Signer,
    session: String,
) {
    while let Some(message) = messages.recv().await {
        let parts = wire::encode(&[], &message, &session, &signer);
        if let Err(err) = socket.send(frames(parts)).await {
            tracing::warn!("cannot publish on iopub: {err}");
        }
    }
}

/// The heartbeat: every message echoed back. A peer that sends garbage, or leaves before
/// its echo, is dropped by the socket; the heartbeat goes on for the others.
async fn echo(mut socket: zeromq::RepSocket) {
    loop {
        match socket.recv().await {
            Ok(message) => {
                if let Err(err) = socket.send(message).await {
                    tracing::debug!("cannot echo a heartbeat: {err}");
                }
            }
            Err(zeromq::ZmqError::NoMessage) => return,
            Err(err) => tracing::warn!("dropped a peer of the heartbeat channel: {err}"),
        }
    }
}

/// When a reply went out, by this process's clock and by the wall clock.
#[derive(Clone, Copy)]
struct Replied {
    at: Instant,
    wall: SystemTime,
}

impl Replied {
    fn now() -> Replied {
        Replied {
            at: Instant::now(),
            wall: SystemTime::now(),
        }
    }

    /// Whether `request` was sent before this reply went out: read off the socket before
    /// it, or stamped by its client (`header.date`, the front end's clock: a local front end
    /// shares this one) before it. The second catches a request its client sent before the
    /// reply but that reached the socket after it (a client descheduled between two sends);
    /// a request a client makes after reading the reply is dated after it.
    fn came_after(&self, request: &Received) -> bool {
        request.at <= self.at
            || request.incoming.request.header["date"]
                .as_str()
                .and_then(|date| humantime::parse_rfc3339_weak(date).ok())
                .is_some_and(|sent| sent < self.wall)
    }
}

/// A request as the reader took it off its socket.
struct Received {
    /// When: an error aborts the executions queued before its reply went out, never those
    /// a client sent after reading it.
    at: Instant,
    incoming: Incoming,
}

/// Reads a ROUTER channel's requests into `jobs`, dropping (with a log line) what is not a
/// message signed with the connection key or was read before.
async fn read(
    mut socket: zeromq::RouterRecvHalf,
    channel: &'static str,
    reader: Reader,
    jobs: mpsc::Sender<Received>,
) {
    while let Ok(message) = socket.recv().await {
        match reader.read(message.into_vec(), channel) {
            Ok(incoming) => {
                let received = Received {
                    at: Instant::now(),
                    incoming,
                };
                if jobs.send(received).await.is_err() {
                    return;
                }
            }
            Err(err) => tracing::warn!("ignored a message on the {channel} channel: {err}"),
        }
    }
}

/// The control channel: kernel info, interrupt and shutdown, answered while a cell runs.
struct Control {
    reader: Reader,
    wire: Wire,
    interrupter: Interrupter,
    language: cellvisor::Language,
    shutdown: watch::Sender<Option<bool>>,
}

impl Control {
    async fn serve(self, socket: zeromq::RouterSocket) {
        let (mut out, socket_in) = socket.split();
        let (tx, mut requests) = mpsc::channel(BACKLOG);
        tokio::spawn(read(socket_in, "control", self.reader.clone(), tx));
        while let Some(Received {
            incoming: request, ..
        }) = requests.recv().await
        {
            let mut ending = None;
            let (msg_type, content) = match request.request.msg_type.as_str() {
                "interrupt_request" => {
                    if let Err(err) = self.interrupter.interrupt().await {
                        tracing::warn!("cannot interrupt the session: {err}");
                    }
                    ("interrupt_reply".to_string(), json!({"status": "ok"}))
                }
                "shutdown_request" => {
                    let restart = request.request.content["restart"]
                        .as_bool()
                        .unwrap_or(false);
                    ending = Some(restart);
                    let content = json!({"status": "ok", "restart": restart});
                    ("shutdown_reply".to_string(), content)
                }
                "kernel_info_request" => (
                    "kernel_info_reply".to_string(),
                    mapping::kernel_info(self.language),
                ),
                other => (
                    mapping::reply_type(other),
                    mapping::unsupported_reply(other),
                ),
            };
            let frames = self.wire.reply(&request, &msg_type, content);
            if let Err(err) = out.send(frames).await {
                tracing::warn!("cannot answer on the control channel: {err}");
            }
            // Told after the reply went out, so the front end reads it before the end.
            if ending.is_some() {
                let _ = self.shutdown.send(ending);
            }
        }
    }
}

/// The shell channel's state: the execution count and history, one request at a time.
struct Shell {
    wire: Wire,
    out: zeromq::RouterSendHalf,
    count: u64,
    history: History,
    shutdown: watch::Sender<Option<bool>>,
    /// Whether the session's worker was asked to send its cells' values (for
    /// `execute_result`); asked again once a new worker ran a cell.
    values_asked: bool,
    /// When the last reply went out: a failed execution aborts only what was sent before.
    replied: Option<Replied>,
}

impl Shell {
    async fn send(&mut self, to: &Incoming, msg_type: &str, content: Value) {
        self.replied = Some(Replied::now());
        let frames = self.wire.reply(to, msg_type, content);
        if let Err(err) = self.out.send(frames).await {
            tracing::warn!("cannot answer on the shell channel: {err}");
        }
    }

    async fn abort(&mut self, job: &Incoming) {
        let parent = &job.request.header;
        self.wire.status(parent, "busy");
        self.send(job, "execute_reply", mapping::aborted_reply())
            .await;
        self.wire.status(parent, "idle");
    }

    /// Answers one request between `busy` and `idle`; whether it was an execution that
    /// failed with `stop_on_error`.
    async fn handle(&mut self, session: &mut Session, job: &Incoming) -> bool {
        let parent = &job.request.header;
        let content = &job.request.content;
        let language = session.language;
        self.wire.status(parent, "busy");
        let mut failed = false;
        let mut ending = None;
        let (msg_type, reply) = match job.request.msg_type.as_str() {
            "execute_request" => {
                let stop_on_error = content["stop_on_error"].as_bool().unwrap_or(true);
                let (reply, failure) = self.execute(session, job).await;
                failed = failure && stop_on_error;
                if failed {
                    // Requests that reached the socket while the cell ran may still be on
                    // their way through ZeroMQ's tasks and the reader (one thread): they get
                    // their turn before the reply goes out, so the abort finds them queued,
                    // while whatever a client sends after reading the reply arrives after it.
                    for _ in 0..READER_HOPS {
                        tokio::task::yield_now().await;
                    }
                }
                ("execute_reply", reply)
            }
            "complete_request" => {
                let ask = snippets::Completion::of(language, content);
                let found = snippet(session, &ask.cell).await;
                ("complete_reply", ask.reply(found))
            }
            "inspect_request" => {
                let found = match snippets::inspection_of(language, content) {
                    Some(cell) => snippet(session, &cell).await,
                    None => None,
                };
                ("inspect_reply", snippets::inspect_reply(found))
            }
            "shutdown_request" => {
                let restart = content["restart"].as_bool().unwrap_or(false);
                ending = Some(restart);
                (
                    "shutdown_reply",
                    json!({"status": "ok", "restart": restart}),
                )
            }
            other => {
                if let Some(answer) = shell::answer(language, &self.history, other, content) {
                    answer
                } else {
                    let reply_type = mapping::reply_type(other);
                    self.send(job, &reply_type, mapping::unsupported_reply(other))
                        .await;
                    self.wire.status(parent, "idle");
                    return false;
                }
            }
        };
        self.send(job, msg_type, reply).await;
        self.wire.status(parent, "idle");
        // Told once the reply went out (nothing is awaited after it): the kernel's end
        // never cuts its own reply short.
        if ending.is_some() {
            let _ = self.shutdown.send(ending);
        }
        failed
    }

    /// An `execute_request`: its cell, its output on iopub; its reply, and whether it failed.
    async fn execute(&mut self, session: &mut Session, job: &Incoming) -> (Value, bool) {
        let parent = &job.request.header;
        let content = &job.request.content;
        let code = content["code"].as_str().unwrap_or_default();
        let silent = content["silent"].as_bool().unwrap_or(false);
        let store_history = !silent && content["store_history"].as_bool().unwrap_or(true);
        if store_history {
            self.count += 1;
            self.history.remember(self.count, code);
        }
        let count = self.count;
        if !silent {
            self.wire
                .publish("execute_input", parent, mapping::execute_input(code, count));
        }
        if !self.values_asked {
            let code = crate::jupyter::snippets::send_values_code(session.language);
            match session.run(code, |_| {}).await {
                Ok(result) if !result.report.status.failed() => self.values_asked = true,
                Ok(result) => tracing::debug!("values not asked for: {}", result.report.output),
                Err(why) => tracing::debug!("values not asked for: {why}"),
            }
        }
        let wire = &self.wire;
        let mut outputs = Outputs::new(session.language);
        let outcome = session
            .run(code, |event| {
                if silent {
                    return;
                }
                for (msg_type, content) in outputs.event(&event) {
                    wire.publish(msg_type, parent, content);
                }
            })
            .await;
        if outcome.as_ref().is_ok_and(|r| r.report.notice.is_some()) {
            // A new worker ran the cell: the next cell asks it for its values again.
            self.values_asked = false;
        }
        let (reply, failure) = shell::outcome(&outcome, count);
        if !silent {
            for (msg_type, content) in outputs.finish(failure.as_ref(), count) {
                self.wire.publish(msg_type, parent, content);
            }
        }
        (reply, failure.is_some())
    }
}

/// Runs a completion or inspection cell and reads its answer (none when the cell failed or
/// printed none).
async fn snippet(session: &mut Session, cell: &str) -> Option<Value> {
    let result = session.run(cell, |_| {}).await.ok()?;
    snippets::answer(&result.report.output)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jupyter::message::Request;
    use std::time::Duration;

    fn request(at: Instant, date: Option<&str>) -> Received {
        let mut header = json!({"msg_id": "m", "msg_type": "execute_request"});
        if let Some(date) = date {
            header["date"] = json!(date);
        }
        Received {
            at,
            incoming: Incoming {
                ids: Vec::new(),
                signature: Bytes::new(),
                request: Request {
                    channel: "shell".into(),
                    header,
                    msg_type: "execute_request".into(),
                    session: String::new(),
                    content: json!({}),
                },
            },
        }
    }

    #[test]
    fn what_was_sent_before_an_error_reply_is_aborted_and_what_came_after_runs() {
        let reply = Replied::now();
        let wall = |offset: i64| {
            let at = if offset < 0 {
                reply.wall - Duration::from_millis(offset.unsigned_abs())
            } else {
                reply.wall + Duration::from_millis(offset.unsigned_abs())
            };
            humantime::format_rfc3339_micros(at).to_string()
        };
        let earlier = reply.at - Duration::from_millis(5);
        let later = reply.at + Duration::from_millis(5);
        // Read off the socket before the reply: sent before it, whatever its date says.
        assert!(reply.came_after(&request(earlier, None)));
        assert!(reply.came_after(&request(earlier, Some(&wall(10)))));
        // Read after the reply but dated before it: its client sent it first.
        assert!(reply.came_after(&request(later, Some(&wall(-3)))));
        // Read after the reply and dated after it (or undated, or unreadable): it runs.
        assert!(!reply.came_after(&request(later, Some(&wall(3)))));
        assert!(!reply.came_after(&request(later, None)));
        assert!(!reply.came_after(&request(later, Some("yesterday"))));
    }
}
