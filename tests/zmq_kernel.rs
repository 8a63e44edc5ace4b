//! `cellvisor kernel` through Jupyter's own clients: the kernelspecs `cellvisor kernel
//! install --prefix` writes, started by jupyter_client (as JupyterLab, nbclient and
//! `jupyter console` start kernels) against a test daemon, with real workers.
//!
//! - `jupyter_kernel_test_passes_for_the_three_kernelspecs`: jupyter_kernel_test's suite
//!   (tests/jupyter_kernel/test_kernels.py) for Python, JavaScript and Lua.
//! - `forged_messages_attached_sessions_and_shutdown`: a message signed with another key is
//!   dropped and the kernel goes on; `--session` attaches and leaves the session open; a
//!   kernel's shutdown ends its process and closes its own session.
//! - `notebooks_run_through_nbclient_as_through_ipykernel`: every notebook in
//!   examples/notebooks through both.
//! - `kernel_install_names_bad_input`: the install's errors.

mod common;

use common::daemon::Daemon;
use common::test_venv;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What the Python side needs (importable under these names).
const PACKAGES: &[&str] = &[
    "jupyter_kernel_test",
    "pytest",
    "nbclient",
    "nbformat",
    "ipykernel",
    "jupyter_client",
];

/// The session the `--session` kernelspecs attach to.
const ATTACHED: &str = "agent-zmq";

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/jupyter_kernel")
}

/// Installs the kernelspecs into `prefix` (with `extra` flags); their `kernels` directory.
fn install(daemon: &Daemon, prefix: &Path, extra: &[&str]) -> PathBuf {
    let mut args = vec!["kernel", "install", "--prefix"];
    let prefix_text = prefix.to_string_lossy().into_owned();
    args.push(&prefix_text);
    args.extend(extra);
    let run = daemon.world.run(&args);
    assert_eq!(run.code, 0, "kernel install failed: {}", run.stderr);
    prefix.join("share/jupyter/kernels")
}

/// Runs pytest on `file` (in tests/jupyter_kernel) against `daemon`, with the kernelspecs
/// installed in its world, and asserts it passed.
fn pytest(daemon: &Daemon, file: &str) {
    let python = test_venv(PACKAGES).join("bin/python");
    let root = daemon.world.dir.path();
    let plain = install(daemon, &root.join("prefix"), &[]);
    let attached = install(
        daemon,
        &root.join("attached"),
        &["--session", ATTACHED, "--languages", "py"],
    );
    assert!(plain.join("cellvisor-javascript/kernel.json").is_file());
    let output = Command::new(python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs"])
        .arg(tests_dir().join(file))
        // The world's marker: every kernel (and worker) the run starts is found and ended.
        .env("XDG_RUNTIME_DIR", daemon.world.runtime_dir())
        .env("XDG_STATE_HOME", root.join("state"))
        .env("CELLVISOR_CONFIG", daemon.world.config_path())
        .env("CELLVISOR_SOCKET", &daemon.socket)
        .env("CELLVISOR_BIN", env!("CARGO_BIN_EXE_cellvisor"))
        .env("CELLVISOR_ATTACHED_KERNELS", &attached)
        .env("CELLVISOR_ATTACHED_SESSION", ATTACHED)
        .env("JUPYTER_PATH", root.join("prefix/share/jupyter"))
        .env("JUPYTER_DATA_DIR", root.join("jupyter-data"))
        .env("JUPYTER_RUNTIME_DIR", root.join("jupyter-runtime"))
        .env("JUPYTER_CONFIG_DIR", root.join("jupyter-config"))
        .env("IPYTHONDIR", root.join("ipython"))
        .env("JUPYTER_PLATFORM_DIRS", "1")
        .current_dir(daemon.world.work_dir())
        .output()
        .expect("run pytest");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{file} failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains(" passed"), "{stdout}");
}

#[test]
fn jupyter_kernel_test_passes_for_the_three_kernelspecs() {
    let daemon = Daemon::start();
    pytest(&daemon, "test_kernels.py");
    daemon.stop();
}

#[test]
fn forged_messages_attached_sessions_and_shutdown() {
    let daemon = Daemon::start();
    pytest(&daemon, "test_behaviour.py");
    daemon.stop();
}

#[test]
fn notebooks_run_through_nbclient_as_through_ipykernel() {
    let daemon = Daemon::start();
    pytest(&daemon, "test_notebooks.py");
    daemon.stop();
}

#[test]
fn kernel_install_names_bad_input() {
    let daemon = Daemon::start();
    let world = &daemon.world;
    let prefix = world.dir.path().join("p").to_string_lossy().into_owned();
    let cases: [(&[&str], &str); 5] = [
        (&["--languages", "py,ruby"], "unknown language \"ruby\""),
        (&["--languages", ","], "names no language"),
        (&["--session", "a b"], "no session name"),
        (&["--user", "--sys-prefix"], "cannot be used with"),
        (&["--prefix", "/proc/nope"], "cannot write"),
    ];
    for (flags, said) in cases {
        let mut args = vec!["kernel", "install"];
        if !flags.contains(&"--prefix") && !flags.contains(&"--user") {
            args.extend(["--prefix", prefix.as_str()]);
        }
        args.extend(flags);
        let run = world.run(&args);
        assert_ne!(run.code, 0, "{args:?} was accepted");
        assert!(run.stderr.contains(said), "{args:?}: {}", run.stderr);
    }
    // The kernel itself: no connection file, a bad one, an unknown language.
    let run = world.run(&["kernel", "--language", "py"]);
    assert!(run.stderr.contains("--connection-file"), "{}", run.stderr);
    let bad = world.dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"ip": "127.0.0.1", "transport": "ipc"}"#).unwrap();
    let bad = bad.to_string_lossy().into_owned();
    let run = world.run(&["kernel", "-f", &bad, "--language", "py"]);
    assert!(run.stderr.contains("shell_port"), "{}", run.stderr);
    let run = world.run(&["kernel", "-f", &bad, "--language", "ruby"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    // Nothing was written where the refused installs pointed.
    assert!(!world
        .dir
        .path()
        .join("p/share/jupyter/kernels/cellvisor-python")
        .exists());
    daemon.stop();
}
