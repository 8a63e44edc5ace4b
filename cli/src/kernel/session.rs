//! The daemon session behind a kernel, through the client library: the daemon found (or
//! started, as `cellvisor eval` starts it) on its socket, the kernel's cells run in the
//! session, an interrupt on a connection of its own (the first one is busy with the running
//! cell), and the session closed at the end when the kernel made it (and owned by its
//! connection, so the daemon closes it when a killed kernel's connection drops).

use cellvisor::cell::{CellEvent, CellResult, CellSpec, EvalRequest};
use cellvisor::daemon::client::{Client, ClientError};
use cellvisor::daemon::protocol::method;
use cellvisor::Language;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::Mutex;

/// Where the daemon is and how to start it.
#[derive(Debug, Clone)]
pub struct DaemonPlace {
    /// Its socket.
    pub socket: PathBuf,
    /// This program, to start a daemon with.
    pub program: PathBuf,
    /// The configuration file a started daemon reads.
    pub config: Option<PathBuf>,
}

/// A kernel's session.
pub struct Session {
    place: DaemonPlace,
    /// The connection cells run on; `None` after it broke (the next cell connects again).
    client: Option<Client>,
    /// The session's name.
    pub name: String,
    /// The kernel's language.
    pub language: Language,
    /// Whether the kernel made the session (then it closes it at the end).
    pub own: bool,
    /// The directory the cells run in (the kernel's, where the front end started it).
    cwd: PathBuf,
    /// Whether a cell of the kernel runs: held while it is marked and while an interrupt
    /// stops it, so an interrupt never reaches a cell another host runs in an attached
    /// session, nor the kernel's next cell.
    running: Arc<Mutex<bool>>,
}

impl Session {
    /// The session `name` (attached, never closed by the kernel), or a fresh one of the
    /// kernel's own; the daemon is reached (or started) now, so a kernel that cannot reach it
    /// fails at its start.
    pub async fn open(
        place: DaemonPlace,
        name: Option<String>,
        language: Language,
    ) -> Result<Session, String> {
        let cwd = std::env::current_dir()
            .map_err(|e| format!("cannot read the current directory: {e}"))?;
        let own = name.is_none();
        let name = name.unwrap_or_else(|| format!("kernel-{}", uuid::Uuid::new_v4()));
        let mut session = Session {
            place,
            client: None,
            name,
            language,
            own,
            cwd,
            running: Arc::default(),
        };
        session.client().await?;
        Ok(session)
    }

    async fn client(&mut self) -> Result<&mut Client, String> {
        if self.client.is_none() {
            let place = &self.place;
            let client = Client::connect_or_start(
                &place.socket,
                &place.program,
                place.config.as_deref(),
                None,
            )
            .await
            .map_err(|e| e.to_string())?;
            let params = self.params();
            let client = self.client.insert(client);
            if self.own {
                // The daemon closes the kernel's own session when this connection closes,
                // even when the kernel is killed and closes nothing itself.
                if let Err(err) = client.call(method::OWN, params).await {
                    tracing::warn!("the daemon will not close the kernel's session with it: {err}");
                }
            }
        }
        self.client
            .as_mut()
            .ok_or_else(|| "no connection to the daemon".to_string())
    }

    /// Runs `code` as one cell of the session, each event to `on_event` as it comes.
    pub async fn run(
        &mut self,
        code: &str,
        mut on_event: impl FnMut(CellEvent),
    ) -> Result<CellResult, String> {
        let request = EvalRequest {
            session: self.name.clone(),
            cwd: Some(self.cwd.clone()),
            cells: vec![CellSpec::new(self.language, code)],
            tools: Vec::new(),
            virtual_env: std::env::var_os("VIRTUAL_ENV")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            env: None,
            fresh: false,
            sandbox: None,
            resume: false,
            timeout: None,
            reset: false,
            // The values' bundles too: a cell's trailing value is its `execute_result`.
            events: cellvisor::daemon::protocol::Events::Values,
            request_id: None,
        };
        *self.running.lock().await = true;
        let outcome = self.eval(&request, &mut on_event).await;
        *self.running.lock().await = false;
        outcome
    }

    async fn eval(
        &mut self,
        request: &EvalRequest,
        on_event: &mut impl FnMut(CellEvent),
    ) -> Result<CellResult, String> {
        let client = self.client().await?;
        let outcome = client
            .eval(request, |params| {
                if let Some(event) = event_of(params) {
                    on_event(event);
                }
            })
            .await;
        match outcome {
            Ok(mut result) => result
                .cells
                .pop()
                .ok_or_else(|| "the request ran no cell".to_string()),
            Err(ClientError::Rpc(refusal)) => Err(refusal.message),
            Err(broken) => {
                // The connection is gone (the daemon stopped): the next cell connects again.
                self.client = None;
                Err(broken.to_string())
            }
        }
    }

    /// Forgets the connection a cell was left running on (the kernel is ending): what comes
    /// next (the close of its own session) connects again.
    pub fn abandon(&mut self) {
        self.client = None;
    }

    /// What interrupts this session's running cell from another task.
    pub fn interrupter(&self) -> Interrupter {
        Interrupter {
            socket: self.place.socket.clone(),
            params: self.params(),
            running: Arc::clone(&self.running),
        }
    }

    fn params(&self) -> Value {
        json!({"session": self.name, "language": self.language.short_name(), "cwd": self.cwd})
    }

    /// Closes the session's worker in the kernel's language when the kernel made it.
    pub async fn close_if_own(&mut self) {
        if !self.own {
            return;
        }
        let params = self.params();
        if let Ok(client) = self.client().await {
            if let Err(err) = client.call(method::CLOSE, params).await {
                tracing::warn!("cannot close the kernel's session: {err}");
            }
        }
    }
}

/// Interrupts a session's running cell on a connection of its own.
#[derive(Debug, Clone)]
pub struct Interrupter {
    socket: PathBuf,
    params: Value,
    running: Arc<Mutex<bool>>,
}

impl Interrupter {
    /// Interrupts the kernel's running cell, if one runs (never another host's).
    pub async fn interrupt(&self) -> Result<(), String> {
        let running = self.running.lock().await;
        if !*running {
            return Ok(());
        }
        let mut client = Client::connect(&self.socket)
            .await
            .map_err(|e| e.to_string())?;
        client
            .call(method::INTERRUPT, self.params.clone())
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// The event an `eval/event` notification's params carry (the ones iopub shows).
fn event_of(params: &Value) -> Option<CellEvent> {
    let index = params["index"].as_u64()? as usize;
    match params["event"].as_str()? {
        "output" => Some(CellEvent::Output {
            index,
            stream: if params["stream"] == "stderr" {
                "stderr"
            } else {
                "stdout"
            },
            text: params["text"].as_str()?.to_string(),
        }),
        "display" => Some(CellEvent::Display {
            index,
            bundle: params["bundle"].clone(),
        }),
        "status" => Some(CellEvent::Status {
            index,
            status: params["status"].clone(),
        }),
        "value" => Some(CellEvent::Value {
            index,
            bundle: params["bundle"].clone(),
        }),
        "clear_output" => Some(CellEvent::ClearOutput {
            index,
            wait: params["wait"].as_bool().unwrap_or(false),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemons_events_are_read_back() {
        let out = json!({"request_id": 1, "event": "output", "index": 0, "stream": "stderr", "text": "x"});
        assert_eq!(
            event_of(&out),
            Some(CellEvent::Output {
                index: 0,
                stream: "stderr",
                text: "x".into()
            })
        );
        let display = json!({"event": "display", "index": 2, "bundle": {"text/plain": "1"}});
        assert!(matches!(
            event_of(&display),
            Some(CellEvent::Display { index: 2, .. })
        ));
        assert_eq!(
            event_of(&json!({"event": "clear_output", "index": 1, "wait": true})),
            Some(CellEvent::ClearOutput {
                index: 1,
                wait: true
            })
        );
        let value = json!({"event": "value", "index": 0, "bundle": {"text/plain": "3"}});
        assert_eq!(
            event_of(&value),
            Some(CellEvent::Value {
                index: 0,
                bundle: json!({"text/plain": "3"})
            })
        );
        assert_eq!(event_of(&json!({"event": "cell_done", "index": 0})), None);
        assert_eq!(event_of(&json!({"event": "output"})), None);
    }
}
