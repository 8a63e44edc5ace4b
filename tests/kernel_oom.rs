//! A real kernel OOM kill, told apart from other SIGKILLs (issue 27): the daemon runs in a
//! memory cgroup this test creates under its own (a limit of 256 MiB, so the kernel's OOM
//! killer can only pick among this test's processes), a Python cell goes past it, and the
//! cell's result says `out_of_memory` with `limit: "kernel_oom"` and the cgroup's limit,
//! instead of "killed by signal 9". The cgroup is removed at the end.
//!
//! Runs only as root on a kernel whose memory cgroup (v2, or v1's memory hierarchy) lets a
//! child be created and limited; otherwise it prints why and passes without testing.

mod common;

use common::daemon::{cell, Client};
use common::{wait_until, World};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const LIMIT: u64 = 256 * 1024 * 1024;

/// A memory cgroup of this test's own, removed when dropped (once its processes are gone).
struct Cgroup {
    dir: PathBuf,
}

impl Cgroup {
    /// A child of this process's memory cgroup limited to [`LIMIT`], or why there is none.
    fn create() -> Result<Cgroup, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root".into());
        }
        let membership = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("/proc/self/cgroup: {e}"))?;
        let name = format!("cellvisor-oom-test-{}", std::process::id());
        for line in membership.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(id), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let relative = path.trim_start_matches('/');
            let (base, limit_file) = if id == "0" && controllers.is_empty() {
                (Path::new("/sys/fs/cgroup").join(relative), "memory.max")
            } else if controllers.split(',').any(|c| c == "memory") {
                (
                    Path::new("/sys/fs/cgroup/memory").join(relative),
                    "memory.limit_in_bytes",
                )
            } else {
                continue;
            };
            if !base.join(limit_file).exists() && !base.join("cgroup.subtree_control").exists() {
                continue;
            }
            let dir = base.join(&name);
            if std::fs::create_dir(&dir).is_err() {
                continue;
            }
            let cgroup = Cgroup { dir };
            if std::fs::write(cgroup.dir.join(limit_file), LIMIT.to_string()).is_ok() {
                return Ok(cgroup);
            }
        }
        Err("no memory cgroup this test can create a limited child in (no delegation)".into())
    }

    fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let removed = wait_until(Duration::from_secs(10), || std::fs::remove_dir(&self.dir));
        if let Err(err) = removed {
            eprintln!("could not remove {}: {err}", self.dir.display());
        }
    }
}

/// The daemon, started inside the cgroup; killed (by its pid) if the test fails first.
struct InCgroup {
    child: Option<Child>,
}

impl Drop for InCgroup {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn a_cell_the_kernels_oom_killer_ends_is_out_of_memory_not_signal_9() {
    let cgroup = match Cgroup::create() {
        Ok(cgroup) => cgroup,
        Err(why) => {
            eprintln!("skipped: a real OOM kill needs a memory cgroup of our own: {why}");
            return;
        }
    };
    let world = World::with_config("[python]\nprewarm = 0\n");
    let socket = world.runtime_dir().join("oom.sock");
    // The shell moves itself into the cgroup, then becomes the daemon (the same pid).
    let child = Command::new("sh")
        .args([
            "-c",
            "echo $$ > \"$1\" && exec \"$0\" serve --socket \"$2\"",
        ])
        .arg(env!("CARGO_BIN_EXE_cellvisor"))
        .arg(cgroup.procs())
        .arg(&socket)
        .env("XDG_RUNTIME_DIR", world.runtime_dir())
        .env("XDG_STATE_HOME", world.dir.path().join("state"))
        .env("XDG_CONFIG_HOME", world.config_home())
        .env("CELLVISOR_CONFIG", world.config_path())
        .env_remove("CELLVISOR_SOCKET")
        .current_dir(world.work_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the daemon");
    let mut daemon = InCgroup { child: Some(child) };
    let up = wait_until(Duration::from_secs(15), || {
        std::os::unix::net::UnixStream::connect(&socket).map(|_| ())
    });
    assert!(up.is_ok(), "daemon never listened: {up:?}");
    let mut client = Client::connect(&socket);

    // Written, not just reserved: every page counts against the cgroup's limit.
    let hog = "hog = b'x' * (1024 * 1024 * 1024)";
    let result = client.eval("s", json!([{"language": "py", "code": hog, "timeout": 60}]));
    let ended = cell(&result, 0);
    assert_eq!(ended["status"], "error", "{result:#}");
    let oom = &ended["out_of_memory"];
    assert_eq!(oom["limit"], "kernel_oom", "{result:#}");
    assert_eq!(oom["limit_bytes"].as_u64(), Some(LIMIT), "{result:#}");
    let output = ended["output"].as_str().unwrap_or_default();
    assert!(
        output.contains("the kernel's out-of-memory killer ended it"),
        "{output}"
    );
    // The session goes on, on a new worker, with no verdict for an ordinary cell.
    let after = client.eval("s", json!([{"language": "py", "code": "print(1)"}]));
    assert_eq!(after["cells"][0]["output"], "1\n", "{after:#}");
    assert!(
        after["cells"][0].get("out_of_memory").is_none(),
        "{after:#}"
    );

    client
        .call("shutdown", json!({}))
        .expect("shutdown answered");
    if let Some(mut child) = daemon.child.take() {
        let exited = wait_until(Duration::from_secs(15), || match child.try_wait() {
            Ok(Some(status)) => Ok(status),
            _ => Err(()),
        });
        assert!(exited.is_ok(), "the daemon did not exit");
    }
    world.assert_no_processes_left(Duration::from_secs(5));
    drop(cgroup);
}
