//! The worker's confinement: the Landlock rules the supervisor decided on (see the
//! supervisor's `sandbox` module and docs/sandbox.md), applied once, after the worker's
//! start-up and before its first cell.
//!
//! Landlock confines the calling thread and every process and thread it starts afterwards. So
//! a JavaScript or Lua worker confines its engine thread (the one that runs cells, and starts
//! the frame threads) once the engine is built; the Python shim confines itself right before
//! it starts the interpreter, so the whole Python tree is confined from its first
//! instruction, and reads what the interpreter needs through the read rules. The warden
//! thread, started first, stays outside: it must walk and end the worker's whole tree.
//!
//! A Python shim that adopted a runner forked by a zygote confines itself at the same point
//! with the same rules ([`confine_once_sharing`]) and passes a copy of the ruleset to the
//! runner, which waits for it and restricts itself before it runs anything of the session.
//!
//! A network namespace (for `network = "loopback"` or `network-namespace = true`) can only be
//! entered while the process has a single thread: [`enter_network_namespace`] runs first
//! thing in the worker.

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd,
    RestrictionStatus, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus,
    Scope, ABI,
};
use serde::{Deserialize, Serialize};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub use cellvisor_ipc::env::SANDBOX as SANDBOX_VAR;

/// What a worker enforces; plain data from the supervisor, which only lists features the
/// kernel has (or refused the request when the policy is `required`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rules {
    /// Fail the worker's start when a listed feature cannot be enforced.
    pub required: bool,
    /// Read-only trees or files (missing ones are skipped).
    pub read: Vec<PathBuf>,
    /// Read-write trees or files (missing ones are skipped).
    pub write: Vec<PathBuf>,
    /// The daemon's own directories and secret files: carved out of every read and write
    /// tree that holds them (their siblings granted instead, down the path to each), here in
    /// the worker, when the rules are applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden: Vec<PathBuf>,
    /// Deny TCP connect and bind (Landlock ABI 4).
    pub deny_tcp: bool,
    /// Scope signals and abstract Unix sockets to the worker's domain (Landlock ABI 6).
    pub scope: bool,
    /// Confine connect on named Unix sockets to the write rules (Landlock ABI 9).
    pub confine_unix_connect: bool,
    /// Enter a network namespace of the worker's own, with its loopback up.
    pub network_namespace: bool,
}

/// Why the sandbox could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The rules the supervisor passed cannot be read (a supervisor and worker out of step).
    #[error("the sandbox rules in {SANDBOX_VAR} are not valid: {0}")]
    Rules(String),
    /// The kernel refused to build or apply the ruleset.
    #[error("cannot build the Landlock ruleset: {0}")]
    Landlock(#[from] landlock::RulesetError),
    /// A required sandbox the kernel cannot fully enforce: refused rather than weakened.
    #[error("the sandbox is required but the kernel enforced it only {0}")]
    NotEnforced(&'static str),
    /// A network namespace was asked for and the kernel would not give one.
    #[error("cannot enter a network namespace of the worker's own: {0}")]
    Namespace(std::io::Error),
}

/// The rules in this worker's environment, if any.
pub fn rules_from_env() -> Result<Option<Rules>, SandboxError> {
    match std::env::var(SANDBOX_VAR) {
        Ok(json) if !json.trim().is_empty() => serde_json::from_str(&json)
            .map(Some)
            .map_err(|e| SandboxError::Rules(e.to_string())),
        _ => Ok(None),
    }
}

/// The outcome of the one confinement of this process.
static CONFINED: OnceLock<Result<String, String>> = OnceLock::new();

/// Applies this worker's rules (from `SANDBOX_VAR`) once, with `extra_read` (what the
/// engine needs to keep loading) added; later calls return the first outcome. `Ok(None)`:
/// no sandbox asked for. `Ok(Some(summary))`: what the kernel enforces.
pub fn confine_once(extra_read: &[PathBuf]) -> Result<Option<String>, String> {
    let Some(rules) = rules_from_env().map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    CONFINED
        .get_or_init(|| confine(&rules, extra_read).map_err(|e| e.to_string()))
        .clone()
        .map(Some)
}

/// The filesystem rights a read rule grants on `path`: files take no directory rights.
fn read_access(abi: ABI, is_dir: bool) -> BitFlags<AccessFs> {
    if is_dir {
        AccessFs::from_read(abi)
    } else {
        AccessFs::from_read(abi) & AccessFs::from_file(abi)
    }
}

fn write_access(abi: ABI, is_dir: bool) -> BitFlags<AccessFs> {
    if is_dir {
        AccessFs::from_all(abi)
    } else {
        AccessFs::from_file(abi)
    }
}

/// Restricts the calling thread (and all it starts from now on) to `rules`.
pub fn confine(rules: &Rules, extra_read: &[PathBuf]) -> Result<String, SandboxError> {
    drop_ptrace_capability();
    let ruleset = build_ruleset(rules, extra_read)?;
    summarize(rules, &ruleset.restrict_self()?)
}

/// Confines the calling thread as [`confine_once`] does, and hands `runner` a copy of the
/// very ruleset it applied: the runner a zygote forked for this worker restricts itself
/// with it before it runs anything of the session, so both are confined by one set of rules
/// built in one place (this process, whose `/proc/self` the rules name). `runner` gets
/// `None` when the kernel has no Landlock and the sandbox is not required (the plain path
/// then runs unconfined too, with `no_new_privs`); its error fails the confinement.
pub fn confine_once_sharing(
    extra_read: &[PathBuf],
    runner: impl FnOnce(Option<OwnedFd>) -> Result<(), String>,
) -> Result<Option<String>, String> {
    let Some(rules) = rules_from_env().map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let mut runner = Some(runner);
    let outcome = CONFINED.get_or_init(|| {
        drop_ptrace_capability();
        let ruleset = build_ruleset(&rules, extra_read).map_err(|e| e.to_string())?;
        let copy = ruleset
            .try_clone()
            .map_err(|e| format!("cannot copy the Landlock ruleset for the forked runner: {e}"))?;
        let status = ruleset.restrict_self().map_err(|e| e.to_string())?;
        let summary = summarize(&rules, &status).map_err(|e| e.to_string())?;
        let give = runner.take().ok_or("the runner was confined already")?;
        give(copy.into())?;
        Ok(summary)
    });
    if runner.is_some() {
        // Confined before (by another path): the runner never got its rules.
        return Err("this worker was confined before its forked runner could be".into());
    }
    outcome.clone().map(Some)
}

/// The Landlock ruleset for `rules` plus `extra_read`, created and filled but not applied:
/// the one place rules become a ruleset. Paths are resolved in this process (`/proc/self`
/// is its own directory).
fn build_ruleset(rules: &Rules, extra_read: &[PathBuf]) -> Result<RulesetCreated, SandboxError> {
    // The newest ABI whose filesystem rights we handle: V9 adds connect on named sockets.
    let fs_abi = if rules.confine_unix_connect {
        ABI::V9
    } else {
        ABI::V6
    };
    let level = if rules.required {
        CompatLevel::HardRequirement
    } else {
        CompatLevel::BestEffort
    };
    let mut ruleset = Ruleset::default()
        .set_compatibility(level)
        .handle_access(AccessFs::from_all(fs_abi))?;
    if rules.deny_tcp {
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
    }
    if rules.scope {
        ruleset = ruleset.scope(Scope::from_all(ABI::V6))?;
    }
    let mut created = ruleset.create()?;
    let reads = rules.read.iter().chain(extra_read);
    let grants: Vec<(PathBuf, bool)> = reads
        .map(|p| (p, false))
        .chain(rules.write.iter().map(|p| (p, true)))
        .flat_map(|(path, write)| {
            let kept = if rules.hidden.is_empty() {
                vec![path.clone()]
            } else {
                tree_without(path, &rules.hidden)
            };
            kept.into_iter().map(move |p| (p, write))
        })
        .collect();
    for (path, write) in &grants {
        let (path, write) = (path, *write);
        // A missing path grants nothing; rules name every usual system directory.
        let Ok(meta) = std::fs::metadata(path) else {
            continue;
        };
        let Ok(fd) = PathFd::new(path) else {
            continue;
        };
        let access = if write {
            write_access(fs_abi, meta.is_dir())
        } else {
            read_access(fs_abi, meta.is_dir())
        };
        created = created.add_rule(PathBeneath::new(fd, access))?;
    }
    Ok(created)
}

/// A process with `CAP_SYS_PTRACE` (root) reads other processes' `/proc/<pid>/environ` even
/// when they are non-dumpable, and Landlock's ptrace scoping stops only attaching and memory
/// access: a confined worker gives the capability up, for itself and all it starts.
fn drop_ptrace_capability() {
    use caps::{CapSet, Capability};
    for set in [
        CapSet::Bounding,
        CapSet::Ambient,
        CapSet::Inheritable,
        CapSet::Effective,
        CapSet::Permitted,
    ] {
        // Not held (an ordinary user) is the usual case; nothing to give up then.
        let _ = caps::drop(None, set, Capability::CAP_SYS_PTRACE);
    }
}

fn summarize(rules: &Rules, status: &RestrictionStatus) -> Result<String, SandboxError> {
    let how = match status.ruleset {
        RulesetStatus::FullyEnforced => {
            return Ok(format!("fully enforced ({:?})", status.landlock))
        }
        RulesetStatus::PartiallyEnforced => "partially",
        RulesetStatus::NotEnforced => "not at all",
    };
    if rules.required {
        return Err(SandboxError::NotEnforced(how));
    }
    Ok(format!("enforced {how} ({:?})", status.landlock))
}

/// Moves this process into a new user and network namespace, with its loopback up: call it
/// while the process has one thread. Afterwards no address outside the worker is reachable,
/// by any protocol.
pub fn enter_network_namespace() -> Result<(), SandboxError> {
    use nix::sched::{unshare, CloneFlags};
    let uid = nix::unistd::getuid();
    let gid = nix::unistd::getgid();
    let io = |e: nix::Error| SandboxError::Namespace(std::io::Error::from(e));
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET).map_err(io)?;
    // The same ids inside as outside, so files keep their owners.
    let write =
        |file: &str, text: String| std::fs::write(file, text).map_err(SandboxError::Namespace);
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    loopback_up().map_err(SandboxError::Namespace)
}

/// Brings `lo` up in the current network namespace.
fn loopback_up() -> std::io::Result<()> {
    // SAFETY: a plain socket, closed below.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if sock < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: ifreq is plain old data; all zeroes is a valid value.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write the ifreq we own.
    let result = unsafe {
        if libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut request) < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            if libc::ioctl(sock, libc::SIOCSIFFLAGS, &request) < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(())
            }
        }
    };
    // SAFETY: closing the socket we opened.
    unsafe { libc::close(sock) };
    result
}

/// `root`'s entries without those of `denied` (paths under `root`): what a read rule on
/// `root` may cover when some of its files must stay out of reach. An entry that holds a
/// denied path is opened up in turn, so its other entries stay readable.
pub fn tree_without(root: &Path, denied: &[PathBuf]) -> Vec<PathBuf> {
    if !denied.iter().any(|d| d.starts_with(root)) {
        return vec![root.to_path_buf()];
    }
    if denied.iter().any(|d| d == root) {
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut kept: Vec<PathBuf> = Vec::new();
    let mut names: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    names.sort();
    for path in names {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            kept.extend(tree_without(&path, denied));
        } else if denied.contains(&path) {
            continue;
        } else if meta.file_type().is_symlink() && leads_to_denied(&path, denied) {
            // A rule follows the link: one to a denied path, or to a directory holding
            // one, would grant it whole. Its target stays readable by its own path.
            continue;
        } else {
            kept.push(path);
        }
    }
    kept
}

/// Whether the link `path` resolves to a denied path, into one, or to a directory that
/// holds one. A link that cannot be resolved grants nothing and is kept.
fn leads_to_denied(path: &Path, denied: &[PathBuf]) -> bool {
    let Ok(target) = std::fs::canonicalize(path) else {
        return false;
    };
    denied
        .iter()
        .any(|d| d.starts_with(&target) || target.starts_with(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_without_its_secrets_keeps_every_other_entry() {
        let root = tempfile::tempdir().expect("tempdir");
        let etc = root.path();
        for dir in ["ssh", "ssl/private", "ssl/certs", "apt"] {
            std::fs::create_dir_all(etc.join(dir)).expect("dir");
        }
        for file in ["passwd", "shadow", "ssl/certs/ca.pem", "ssl/openssl.cnf"] {
            std::fs::write(etc.join(file), "").expect("file");
        }
        let denied = [etc.join("shadow"), etc.join("ssh"), etc.join("ssl/private")];
        let kept = tree_without(etc, &denied);
        assert_eq!(
            kept,
            [
                etc.join("apt"),
                etc.join("passwd"),
                etc.join("ssl/certs"),
                etc.join("ssl/openssl.cnf"),
            ]
        );
        assert_eq!(tree_without(&etc.join("apt"), &denied), [etc.join("apt")]);
        assert!(tree_without(&etc.join("ssh"), &denied).is_empty());
    }

    #[test]
    fn a_link_to_a_hidden_path_or_above_one_is_left_out_and_the_rest_kept() {
        let root = tempfile::tempdir().expect("tempdir");
        let base = root.path().canonicalize().expect("canonical");
        let state = base.join("home/u/.local/state/cellvisor");
        std::fs::create_dir_all(&state).expect("state");
        std::fs::create_dir_all(base.join("home/u/project")).expect("project");
        std::fs::write(state.join(".key"), "k").expect("key");
        let link = |to: &Path, name: &str| {
            std::os::unix::fs::symlink(to, base.join(name)).expect("link");
        };
        link(&base.join("home"), "var-home");
        link(&state.join(".key"), "key-link");
        link(&base.join("home/u/project"), "project-link");
        link(&base.join("missing"), "dangling");
        let kept = tree_without(&base, std::slice::from_ref(&state));
        for left_out in ["var-home", "key-link"] {
            assert!(!kept.contains(&base.join(left_out)), "{left_out}: {kept:?}");
        }
        for kept_one in ["project-link", "dangling", "home/u/project"] {
            assert!(kept.contains(&base.join(kept_one)), "{kept_one}: {kept:?}");
        }
        assert!(!kept
            .iter()
            .any(|k| k.starts_with(&state) || state.starts_with(k)));
    }

    #[test]
    fn rules_round_trip_through_the_environment_format() {
        let rules = Rules {
            required: true,
            read: vec!["/usr".into()],
            write: vec!["/tmp/x".into()],
            hidden: vec!["/tmp/x/state".into()],
            deny_tcp: true,
            scope: true,
            confine_unix_connect: false,
            network_namespace: false,
        };
        let json = serde_json::to_string(&rules).expect("json");
        assert_eq!(serde_json::from_str::<Rules>(&json).expect("parse"), rules);
    }
}
