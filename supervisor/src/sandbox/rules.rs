//! The rules one session's sandboxed worker applies: the plan's read and write lists resolved
//! (`cwd`, `~/`), with the host's secrets carved out of them, plus the session's own
//! directories; and pointing the worker's environment at them.

use super::{Feature, Plan};
use crate::environment::WorkerEnv;
use cellvisor_os::sandbox::{tree_without, Rules};
use std::path::{Path, PathBuf};

/// Files under `/etc` no cell reads, even with `/etc` in `sandbox.read`.
const ETC_SECRETS: &[&str] = &[
    "shadow",
    "shadow-",
    "gshadow",
    "gshadow-",
    "sudoers",
    "sudoers.d",
    "ssh",
    "ssl/private",
    "security/opasswd",
    "krb5.keytab",
    "docker",
    "cellvisor",
];

/// Entries of `/proc` a cell never reads, even with `/proc` in `sandbox.read`.
const PROC_SECRETS: &[&str] = &[
    "kcore",
    "kmsg",
    "kallsyms",
    "kpagecount",
    "kpageflags",
    "kpagecgroup",
    "keys",
    "key-users",
];

/// `/proc` (at `proc`) without other processes' directories and kernel secrets: a process's
/// `environ` must stay out of reach even for a cell running as root, whose capabilities
/// would read it past the process being non-dumpable. `self` stays: it names the worker's
/// own directory when the worker builds its rules.
fn proc_without_processes(proc: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(proc) else {
        return Vec::new();
    };
    let mut kept: Vec<PathBuf> = entries
        .flatten()
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            !name.bytes().all(|b| b.is_ascii_digit()) && !PROC_SECRETS.contains(&name.as_ref())
        })
        .map(|entry| entry.path())
        .collect();
    kept.sort();
    kept
}

/// Devices every sandboxed cell may write: writes to them go nowhere (`/dev/full` fails them).
const DISCARDING_DEVICES: [&str; 3] = ["/dev/null", "/dev/zero", "/dev/full"];

/// Where one session's sandboxed worker may write, besides the policy's write paths.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionDirs {
    /// Its own `TMPDIR`.
    pub tmp: PathBuf,
    /// Its own artifact directory (a subdirectory of the shared one).
    pub artifacts: PathBuf,
    /// Its own store directory.
    pub store: Option<PathBuf>,
    /// Its own snapshot directory (this session, this language only).
    pub snapshots: Option<PathBuf>,
}

/// The rules a session's worker applies under `plan`; `env` is the worker's environment
/// (for `HOME` and `XDG_CONFIG_HOME`).
pub fn rules(plan: &Plan, dirs: &SessionDirs, env: &WorkerEnv) -> Rules {
    let lookup = |key: &str| env.get(key).filter(|v| !v.is_empty()).map(PathBuf::from);
    let home = lookup("HOME");
    let resolve = |entry: &str| -> Option<PathBuf> {
        match entry {
            "cwd" => Some(plan.cwd.clone()),
            _ => match entry.strip_prefix("~/") {
                Some(rest) => home.as_ref().map(|h| h.join(rest)),
                None => Some(PathBuf::from(entry)),
            },
        }
    };
    // An entry inside the daemon's own directories grants nothing: only the session's own
    // directories there (added below) are the cell's.
    let outside_hidden = |path: &PathBuf| super::inside_hidden(path, &plan.hidden).is_none();
    let proc = Path::new("/proc");
    let mut denied: Vec<PathBuf> = ETC_SECRETS
        .iter()
        .map(|s| Path::new("/etc").join(s))
        .collect();
    // `/proc` is read as its system files and the worker's own directory, never whole.
    denied.push(proc.to_path_buf());
    let mut read = Vec::new();
    for entry in &plan.policy.read {
        let Some(path) = resolve(entry).filter(outside_hidden) else {
            continue;
        };
        if proc.starts_with(&path) {
            read.extend(proc_without_processes(proc));
        }
        read.extend(tree_without(&path, &denied));
    }
    // The user's startup modules (the project's are under cwd).
    let config_home =
        lookup("XDG_CONFIG_HOME").or_else(|| home.as_ref().map(|h| h.join(".config")));
    if let Some(config_home) = config_home {
        read.push(config_home.join("cellvisor").join("startup"));
    }
    let mut write: Vec<PathBuf> = plan
        .policy
        .write
        .iter()
        .filter_map(|e| resolve(e))
        .filter(outside_hidden)
        .collect();
    // The discarding devices: shells and tools redirect to them as a matter of course, and
    // they hold nothing.
    write.extend(DISCARDING_DEVICES.iter().map(PathBuf::from));
    write.push(dirs.tmp.clone());
    write.push(dirs.artifacts.clone());
    write.extend(dirs.store.clone());
    write.extend(dirs.snapshots.clone());
    write.extend(plan.workspace.clone());
    Rules {
        required: plan.policy.required,
        read,
        write,
        hidden: plan.hidden.clone(),
        deny_tcp: plan.enforced.contains(&Feature::Tcp),
        scope: plan.enforced.contains(&Feature::Scopes),
        confine_unix_connect: plan.enforced.contains(&Feature::UnixConnect),
        network_namespace: plan.enforced.contains(&Feature::NetworkNamespace),
    }
}

/// Points a session's worker environment at its own directories and its rules; with no plan,
/// removes the rules and points it back at the shared artifact directory `shared_artifacts`.
/// Creates the directories the rules name (a rule needs them to exist).
pub fn apply_to_env(
    env: &mut WorkerEnv,
    plan: Option<&Plan>,
    dirs: &SessionDirs,
    shared_artifacts: &Path,
) -> std::io::Result<()> {
    let Some(plan) = plan else {
        if crate::isolation::dirs::foreign_owner(&dirs.tmp).is_none() {
            cellvisor_ipc::socket::ensure_private_dir_nofollow(&dirs.tmp)?;
        }
        env.unconfine(shared_artifacts, &dirs.tmp);
        return Ok(());
    };
    for dir in [&dirs.tmp, &dirs.artifacts]
        .into_iter()
        .chain(dirs.store.as_ref())
        .chain(dirs.snapshots.as_ref())
    {
        // A session with a uid of its own was given its directories when it started.
        if crate::isolation::dirs::foreign_owner(dir).is_none() {
            cellvisor_ipc::socket::ensure_private_dir_nofollow(dir)?;
        }
    }
    let rules = rules(plan, dirs, env);
    env.confine(&rules, &dirs.tmp, &dirs.artifacts)
        .map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::super::{plan, KernelSupport};
    use super::*;
    use cellvisor_config::SandboxConfig;

    const ABI7: KernelSupport = KernelSupport {
        landlock_abi: 7,
        user_namespaces: true,
    };

    #[test]
    fn proc_keeps_system_files_and_the_own_process_but_no_other_process() {
        let kept = proc_without_processes(Path::new("/proc"));
        assert!(kept.contains(&PathBuf::from("/proc/self")), "{kept:?}");
        assert!(kept.contains(&PathBuf::from("/proc/uptime")), "{kept:?}");
        assert!(!kept.contains(&PathBuf::from("/proc/kcore")));
        let me = PathBuf::from(format!("/proc/{}", std::process::id()));
        assert!(!kept.contains(&me));
        assert!(!kept.contains(&PathBuf::from("/proc/1")));
    }

    #[test]
    fn rules_resolve_cwd_home_and_the_sessions_own_directories() {
        let policy = SandboxConfig {
            read: vec!["/usr".into(), "~/lib".into()],
            write: vec!["cwd".into()],
            ..SandboxConfig::default()
        };
        let plan = plan(policy, ABI7, "/work/project".into()).expect("plan");
        let dirs = SessionDirs {
            tmp: "/run/t".into(),
            artifacts: "/run/a/s".into(),
            store: Some("/state/s".into()),
            snapshots: Some("/state/snapshots/s/py".into()),
        };
        let env = WorkerEnv::from_vars(
            [("HOME".into(), "/home/u".into())],
            &cellvisor_config::Config::default(),
            cellvisor_ipc::Language::Python,
        );
        let rules = rules(&plan, &dirs, &env);
        assert_eq!(
            rules.read,
            [
                PathBuf::from("/usr"),
                "/home/u/lib".into(),
                "/home/u/.config/cellvisor/startup".into()
            ]
        );
        assert_eq!(
            rules.write,
            [
                PathBuf::from("/work/project"),
                "/dev/null".into(),
                "/dev/zero".into(),
                "/dev/full".into(),
                "/run/t".into(),
                "/run/a/s".into(),
                "/state/s".into(),
                "/state/snapshots/s/py".into()
            ]
        );
        assert!(rules.deny_tcp && rules.scope && !rules.network_namespace);
    }
}
