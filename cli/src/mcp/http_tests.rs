use super::*;
use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use cellvisor::Options;
use std::path::PathBuf;

#[test]
fn a_session_expires_only_when_idle_with_nothing_running() {
    let start = Instant::now();
    let expiry = Duration::from_secs(60);
    let idle = Activity {
        last: start,
        busy: 0,
    };
    assert!(!idle.expired(start + Duration::from_secs(59), expiry));
    assert!(idle.expired(start + expiry, expiry));
    let busy = Activity { busy: 1, ..idle };
    assert!(!busy.expired(start + expiry * 100, expiry));
    // A clock that went backwards is no idleness.
    let later = Activity {
        last: start + Duration::from_secs(5),
        busy: 0,
    };
    assert!(!later.expired(start, Duration::from_millis(1)));
}

#[test]
fn the_sweep_follows_the_expiry_within_bounds() {
    assert_eq!(sweep_interval(SESSION_EXPIRY), Duration::from_secs(60));
    assert_eq!(
        sweep_interval(Duration::from_secs(8)),
        Duration::from_secs(2)
    );
    assert_eq!(
        sweep_interval(Duration::from_millis(1)),
        Duration::from_millis(10)
    );
}

#[test]
fn session_names_are_valid_cellvisor_session_names() {
    // rmcp's ids are UUIDs; the name must fit the daemon's rule (1 to 128 of A-Z a-z 0-9 . _ - :).
    let name = session_name(&SessionId::from("6f1c0b1e-8d1e-4a4b-9f0e-2d3c4b5a6978"));
    assert_eq!(name, "mcp-6f1c0b1e-8d1e-4a4b-9f0e-2d3c4b5a6978");
    assert!(name.len() <= 128);
    assert!(name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || ".-_:".contains(c)));
}

#[test]
fn only_versions_with_sessions_are_offered() {
    let versions = session_versions();
    assert!(versions.iter().all(ProtocolVersion::has_initialize));
    assert!(versions.contains(&ProtocolVersion::V_2025_11_25));
    assert!(!versions.contains(&ProtocolVersion::V_2026_07_28));
}

const TOKEN: &str = "test-token-for-mcp-over-http";

/// The `cellvisor` binary beside this test's executable (`target/debug/deps/..`): workers
/// run it. `cargo test -p cellvisor-cli` builds it with the end-to-end tests.
fn cellvisor_exe() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's executable");
    let debug = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/debug");
    let cellvisor = debug.join("cellvisor");
    assert!(
        cellvisor.exists(),
        "{} is missing: run `cargo build -p cellvisor-cli` first",
        cellvisor.display()
    );
    cellvisor
}

/// The test venv's python with the MCP SDK (scripts/test-venv).
fn test_python() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let output = std::process::Command::new(root.join("scripts/test-venv"))
        .current_dir(&root)
        .output()
        .expect("run scripts/test-venv");
    assert!(
        output.status.success(),
        "scripts/test-venv failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    root.join("target/test-venv/bin/python")
}

/// 401 without the test's token, as the daemon's listener answers.
async fn require_token(request: Request, next: Next) -> Response {
    let expected = format!("Bearer {TOKEN}");
    match request.headers().get(header::AUTHORIZATION) {
        Some(value) if value.as_bytes() == expected.as_bytes() => next.run(request).await,
        _ => StatusCode::UNAUTHORIZED.into_response(),
    }
}

/// The service in an axum router on 127.0.0.1 (behind a token check, as the daemon's
/// listener has it), over a real supervisor with real workers.
struct Served {
    cv: Arc<Cellvisor>,
    port: u16,
    shutdown: watch::Sender<bool>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    _dir: tempfile::TempDir,
}

impl Served {
    /// Sessions expire after `expiry` (`None`: the daemon's [`SESSION_EXPIRY`]).
    async fn start(expiry: Option<Duration>) -> Served {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = cellvisor_config::Config::default();
        config.sessions.heartbeat_interval = Duration::from_millis(200);
        config.sessions.shutdown_grace = Duration::from_millis(500);
        config.sessions.interrupt_grace = Duration::from_secs(1);
        let cv = Arc::new(
            Cellvisor::start(Options {
                config: config.clone(),
                worker_exe: Some(cellvisor_exe()),
                runtime_dir: Some(dir.path().to_path_buf()),
            })
            .expect("supervisor starts"),
        );
        let (shutdown, shutdown_rx) = watch::channel(false);
        let cells = config.cells.clone();
        let service = match expiry {
            None => streamable_http(Arc::clone(&cv), cells, shutdown_rx),
            Some(expiry) => streamable_http_expiring(Arc::clone(&cv), cells, shutdown_rx, expiry).0,
        };
        let app = axum::Router::new()
            .route_service("/mcp", service)
            .layer(middleware::from_fn(require_token));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("local address").port();
        let mut stop = shutdown.subscribe();
        let server = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stop.wait_for(|s| *s).await;
                })
                .await
        });
        Served {
            cv,
            port,
            shutdown,
            server,
            _dir: dir,
        }
    }

    /// Runs tests/mcp_http_client.py against `/mcp` with `args`; its stdout.
    async fn client(&self, args: &[&str]) -> Result<String, String> {
        let url = format!("http://127.0.0.1:{}/mcp", self.port);
        let mut all = vec![url.as_str(), TOKEN];
        all.extend_from_slice(args);
        self.script("mcp_http_client.py", &all).await
    }

    /// Runs the SDK script `tests/<name>` with `args`; its stdout.
    async fn script(&self, name: &str, args: &[&str]) -> Result<String, String> {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tests")
            .join(name);
        let output = tokio::process::Command::new(test_python())
            .arg(script)
            .args(args)
            .env_remove("VIRTUAL_ENV")
            .kill_on_drop(true)
            .output()
            .await
            .expect("run the SDK script");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr);
        if output.status.success() {
            Ok(stdout)
        } else {
            Err(format!(
                "{name} failed ({}):\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
                output.status
            ))
        }
    }

    /// The cellvisor sessions of MCP sessions still live.
    async fn mcp_sessions(&self) -> Vec<String> {
        let rows = self.cv.status().await.expect("status");
        rows.into_iter()
            .map(|row| row.session)
            .filter(|session| session.starts_with("mcp-"))
            .collect()
    }

    /// Stops the server (it must stop at the shutdown) and every worker.
    async fn stop(self) {
        self.shutdown.send_replace(true);
        let served = tokio::time::timeout(Duration::from_secs(10), self.server).await;
        self.cv.shutdown().await;
        assert!(
            matches!(served, Ok(Ok(Ok(())))),
            "the server stops at the shutdown: {served:?}"
        );
    }
}

/// A session running a cell longer than the expiry keeps it; one left idle ends, and its
/// cellvisor session with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_expires_and_a_busy_one_does_not() {
    let served = Served::start(Some(Duration::from_millis(700))).await;
    let ran = served.client(&["--expiry", "0.7"]).await;
    let left = served.mcp_sessions().await;
    served.stop().await;
    let stdout = ran.unwrap_or_else(|failure| panic!("{failure}"));
    assert!(
        stdout.contains("all MCP HTTP expiry checks passed"),
        "{stdout}"
    );
    println!("{stdout}");
    assert!(left.is_empty(), "sessions left: {left:?}");
}

/// Over HTTP too, a long cell sends progress on its request's stream, a cancel interrupts it
/// and keeps the session's state, and each MCP session reads its own artifacts only
/// (tests/mcp_progress.py).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_cells_send_progress_and_artifacts_are_resources_over_http() {
    let served = Served::start(None).await;
    let url = format!("http://127.0.0.1:{}/mcp", served.port);
    let ran = served
        .script("mcp_progress.py", &["http", &url, TOKEN])
        .await;
    served.stop().await;
    let stdout = ran.unwrap_or_else(|failure| panic!("{failure}"));
    assert!(
        stdout.contains("all MCP progress checks passed"),
        "{stdout}"
    );
    println!("{stdout}");
}
