//! Running `cellvisor` as an unprivileged user, for the tests where root would bypass the
//! check under test (RLIMIT_NPROC, reading another process's environment).

use super::World;
use std::path::Path;
use std::process::{Command, Stdio};

/// The unprivileged uid (and gid) the tests run as.
pub const NOBODY: u32 = 65534;

/// Whether this machine can run a test as [`NOBODY`] (root, with `setpriv`); if not, says
/// why the test (named by `needs`) is skipped.
pub fn can_run_as_nobody(needs: &str) -> bool {
    let can = Path::new("/usr/bin/setpriv").exists() && nix::unistd::getuid().is_root();
    if !can {
        eprintln!("skipped: needs root and setpriv ({needs})");
    }
    can
}

/// Gives `world`'s whole directory to [`NOBODY`], whose daemon writes there.
pub fn give_to_nobody(world: &World) {
    let status = Command::new("chown")
        .arg("-R")
        .arg(format!("{NOBODY}:{NOBODY}"))
        .arg(world.dir.path())
        .status()
        .expect("chown");
    assert!(status.success());
}

/// `cellvisor ARGS` as [`NOBODY`] in `world` (which it must own), ready for more `.env()`.
pub fn as_nobody(world: &World, args: &[&str]) -> Command {
    let home = world.dir.path();
    let mut command = Command::new("setpriv");
    command
        .arg(format!("--reuid={NOBODY}"))
        .arg(format!("--regid={NOBODY}"))
        .arg("--clear-groups")
        .arg(env!("CARGO_BIN_EXE_cellvisor"))
        .args(args)
        .env("XDG_RUNTIME_DIR", world.runtime_dir())
        .env("XDG_STATE_HOME", home.join("state"))
        .env("CELLVISOR_CONFIG", world.config_path())
        .env("HOME", home)
        .env_remove("CELLVISOR_SOCKET")
        .current_dir(world.work_dir())
        .stdin(Stdio::null());
    command
}
