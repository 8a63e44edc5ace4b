//! Shared harness for the end-to-end tests: run the real `cellvisor` binary with a private
//! runtime directory and a test config, and prove afterwards that no process it started is
//! left behind.
#![allow(dead_code)]

pub mod daemon;
pub mod etcd;
pub mod fleet;
pub mod net;
pub mod nobody;

use cellvisor::{Cellvisor, Config, Options};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The short intervals end-to-end tests run under, as config-file text (for the daemon and
/// the CLI); [`short_intervals`] is the same as a [`Config`] (for an embedded supervisor).
pub const SHORT_INTERVALS: &str = "[sessions]\n\
    heartbeat-interval = \"200ms\"\n\
    heartbeat-timeout = \"1s\"\n\
    sweep-interval = \"200ms\"\n\
    idle-timeout = \"0s\"\n\
    interrupt-grace = \"1s\"\n\
    shutdown-grace = \"500ms\"\n";

/// [`SHORT_INTERVALS`] as a configuration.
pub fn short_intervals() -> Config {
    cellvisor_config::parse_str(SHORT_INTERVALS, Path::new("short-intervals.toml"), [])
        .expect("the short-interval config is valid")
        .config
}

/// Builds `cellvisor-py-worker` beside the `cellvisor` under test, once per test program:
/// it is a package of its own, which `cargo test -p cellvisor-cli` does not build, and
/// Python sessions run on it (an older one would hand every Python worker to `cellvisor`).
/// Its own dependencies' features only, so nothing else in the target directory changes.
pub fn python_worker_program_built() {
    static BUILT: std::sync::Once = std::sync::Once::new();
    BUILT.call_once(|| {
        let profile_dir = Path::new(env!("CARGO_BIN_EXE_cellvisor"))
            .parent()
            .expect("cellvisor lies in a profile directory");
        let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => "dev".to_string(),
            Some(other) => other.to_string(),
            None => panic!("no profile directory: {}", profile_dir.display()),
        };
        let target_dir = profile_dir.parent().expect("a target directory");
        let output = Command::new(env!("CARGO"))
            .args([
                "build",
                "--quiet",
                "-p",
                "cellvisor-py-worker",
                "--profile",
                &profile,
            ])
            .arg("--target-dir")
            .arg(target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("cargo runs");
        assert!(
            output.status.success(),
            "cargo build -p cellvisor-py-worker failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    });
}

/// A test's private world: its own runtime directory (so the processes it starts can be
/// found by their environment) and config file.
pub struct World {
    pub dir: tempfile::TempDir,
}

impl World {
    pub fn new() -> World {
        World::with_config("")
    }

    /// A world whose config file holds `extra`. Its directory is open to traversal (0711,
    /// nothing in it can be listed), as a daemon at the `uid` isolation level needs of the
    /// directories above its runtime and state directories: its sessions' uids reach their
    /// own directories inside.
    pub fn with_config(extra: &str) -> World {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        python_worker_program_built();
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))
            .expect("chmod the world");
        std::fs::create_dir_all(dir.path().join("run")).expect("run dir");
        std::fs::create_dir_all(dir.path().join("work")).expect("work dir");
        // The daemon's `XDG_STATE_HOME`, open to traversal too (made by the daemon, it
        // would be private, and a daemon at `auto` would stay at none, saying so).
        std::fs::DirBuilder::new()
            .mode(0o711)
            .create(dir.path().join("state"))
            .expect("state dir");
        std::fs::write(dir.path().join("config.toml"), extra).expect("config");
        World { dir }
    }

    /// A supervisor embedded through the library, under [`short_intervals`] as changed by
    /// `configure`, whose workers this world finds (and proves gone).
    pub fn supervisor(&self, configure: impl FnOnce(&mut Config)) -> Cellvisor {
        self.supervisor_running(env!("CARGO_BIN_EXE_cellvisor").into(), configure)
    }

    /// [`World::supervisor`] whose workers run `worker_exe`.
    pub fn supervisor_running(
        &self,
        worker_exe: PathBuf,
        configure: impl FnOnce(&mut Config),
    ) -> Cellvisor {
        let mut config = short_intervals();
        // Snapshots stay in the world, as the daemon's do (its XDG_STATE_HOME).
        config.snapshots.dir = Some(self.dir.path().join("state/cellvisor/snapshots"));
        configure(&mut config);
        // The marker by which the world finds every process the supervisor starts.
        config.env.set.insert(
            "XDG_RUNTIME_DIR".into(),
            self.runtime_dir().to_string_lossy().into_owned(),
        );
        Cellvisor::start(Options {
            config,
            worker_exe: Some(worker_exe),
            runtime_dir: Some(self.runtime_dir()),
        })
        .expect("supervisor starts")
    }

    pub fn runtime_dir(&self) -> PathBuf {
        self.dir.path().join("run")
    }

    pub fn work_dir(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// `$XDG_CONFIG_HOME` of this world's processes (user startup modules live below it).
    pub fn config_home(&self) -> PathBuf {
        self.dir.path().join("config-home")
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("config.toml")
    }

    /// `cellvisor ARGS` in this world.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cellvisor"));
        cmd.env("XDG_RUNTIME_DIR", self.runtime_dir())
            .env("XDG_STATE_HOME", self.dir.path().join("state"))
            .env("XDG_CONFIG_HOME", self.config_home())
            .env("CELLVISOR_CONFIG", self.config_path())
            .env_remove("CELLVISOR_SOCKET")
            .current_dir(self.work_dir())
            .stdin(Stdio::null());
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Run {
        let output = self.command().args(args).output().expect("run cellvisor");
        Run::from(output)
    }

    pub fn run_with_stdin(&self, args: &[&str], stdin: &str) -> Run {
        use std::io::Write;
        let mut child = self
            .command()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn cellvisor");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(stdin.as_bytes())
            .expect("write stdin");
        Run::from(child.wait_with_output().expect("wait"))
    }

    /// Writes a cells file and returns its path.
    pub fn cells_file(&self, json: &serde_json::Value) -> PathBuf {
        let path = self.dir.path().join(format!(
            "cells-{}.json",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default()
        ));
        std::fs::write(&path, json.to_string()).expect("cells file");
        path
    }

    /// `cellvisor eval --no-daemon --json --cells FILE` with `cells` written to FILE.
    pub fn run_cells(&self, cells: &serde_json::Value) -> Run {
        let file = self.cells_file(cells);
        self.run(&["eval", "--no-daemon", "--json", "--cells", path_str(&file)])
    }

    /// Processes whose environment points at this world's runtime directory: everything the
    /// test started, workers and their children included.
    pub fn processes(&self) -> Vec<u32> {
        let marker = format!("XDG_RUNTIME_DIR={}", self.runtime_dir().display());
        let mut found = Vec::new();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return found;
        };
        for entry in entries.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if pid == std::process::id() {
                continue;
            }
            let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
                continue;
            };
            if environ
                .split(|b| *b == 0)
                .any(|var| var == marker.as_bytes())
            {
                // Zombies are reaped by their parent; they hold no resources worth reporting.
                let state = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
                if !state.contains(") Z ") {
                    found.push(pid);
                }
            }
        }
        found
    }

    /// This world's processes whose command line contains `needle` (arguments are separated
    /// by NUL bytes in it).
    pub fn processes_running(&self, needle: &str) -> Vec<u32> {
        self.processes()
            .into_iter()
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .map(|cmdline| String::from_utf8_lossy(&cmdline).contains(needle))
                    .unwrap_or(false)
            })
            .collect()
    }

    /// Fails if any process of this world is still alive after `within`; kills leftovers so
    /// one failure does not leak into the machine.
    pub fn assert_no_processes_left(&self, within: Duration) {
        let left = wait_until(within, || {
            let left = self.processes();
            left.is_empty().then_some(()).ok_or(left)
        });
        if let Err(left) = left {
            let described: Vec<String> = left.iter().map(|pid| describe(*pid)).collect();
            for pid in &left {
                kill_quietly(*pid);
            }
            panic!("processes left behind: {described:#?}");
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        // Last line of defence: never leave a process of ours on the machine.
        for pid in self.processes() {
            kill_quietly(pid);
        }
    }
}

/// The last `lines` lines of the text file at `path` (nothing if it cannot be read), for a
/// failure's message.
pub fn tail_of_file(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// SIGKILL to `pid`, one of this world's own; one that ended since it was listed is no error.
fn kill_quietly(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

fn describe(pid: u32) -> String {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let cmdline: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    format!("{pid}: {}", cmdline.join(" "))
}

/// Polls `check` until it returns `Ok` or `within` passes; returns the last error then.
pub fn wait_until<T, E>(within: Duration, mut check: impl FnMut() -> Result<T, E>) -> Result<T, E> {
    let deadline = Instant::now() + within;
    loop {
        match check() {
            Ok(value) => return Ok(value),
            Err(err) if Instant::now() >= deadline => return Err(err),
            Err(_) => std::thread::sleep(Duration::from_millis(25)),
        }
    }
}

/// Runs a future to its end from synchronous polling code (`wait_until`) inside a
/// multi-thread Tokio test.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(future))
}

/// What a finished `cellvisor` run printed.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(output: Output) -> Run {
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

impl Run {
    /// The `--json` result.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }

    pub fn assert_code(&self, code: i32) -> &Run {
        assert_eq!(
            self.code, code,
            "exit code\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }
}

/// The `cells` array of a `--json` result.
pub fn cells(result: &serde_json::Value) -> &Vec<serde_json::Value> {
    result["cells"].as_array().expect("cells array")
}

pub fn path_str(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// The resident memory of process `pid` (VmRSS), in bytes.
pub fn rss_bytes(pid: u64) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib * 1024
}

/// A Python interpreter every user can run, as a session's uid must at the `uid`
/// isolation level: `python3` as PATH finds it, resolved (through a pyenv shim) to the real
/// file, when others may enter every directory on the way and run it; otherwise
/// `/usr/bin/python3`. (A per-user pyenv under root's 0700 home is out of a session's reach.)
pub fn shared_python() -> PathBuf {
    static FOUND: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    FOUND
        .get_or_init(|| {
            let found = Command::new("python3")
                .args(["-c", "import sys; print(sys.executable)"])
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
                .and_then(|p| p.canonicalize().ok());
            let system = Path::new("/usr/bin/python3").canonicalize().ok();
            found
                .into_iter()
                .chain(system)
                .find(|p| runnable_by_others(p))
                .unwrap_or_else(|| PathBuf::from("/usr/bin/python3"))
        })
        .clone()
}

/// Whether a user who is not the file's owner may reach and run `path`.
pub fn runnable_by_others(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let others_x =
        |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.permissions().mode() & 0o001 != 0);
    others_x(path) && path.ancestors().skip(1).all(others_x)
}

/// The config text that runs sessions' Python on [`shared_python`].
pub fn shared_python_config() -> String {
    format!(
        "[python]\ninterpreter = {:?}\n",
        shared_python().display().to_string()
    )
}

/// The tests' virtual environment (`target/test-venv`, made by `scripts/test-venv`) with
/// `packages` in it.
pub fn test_venv(packages: &[&str]) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let output = Command::new(root.join("scripts/test-venv"))
        .args(packages)
        .current_dir(&root)
        .output()
        .expect("run scripts/test-venv");
    assert!(
        output.status.success(),
        "scripts/test-venv failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    root.join("target/test-venv")
        .canonicalize()
        .expect("the test venv")
}
