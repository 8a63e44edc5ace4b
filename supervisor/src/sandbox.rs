//! The sandbox policy of a request, as plain data: the operator's `[sandbox]` tightened by the
//! request's own fields ([`effective`]), checked against what the kernel can enforce
//! ([`plan`]), and turned into the rules one session's worker applies (`rules`).
//!
//! The worker applies the rules itself (`cellvisor_os::sandbox`); the daemon adds what
//! Landlock cannot give on every kernel: it refuses any connection from its own workers'
//! process trees (see cellvisor-cli's `daemon::listener`).

mod rules;

pub use cellvisor_client::sandbox::{Feature, SandboxRequest, SandboxStatus};
use cellvisor_config::{SandboxConfig, SandboxNetwork};
pub use rules::{apply_to_env, SessionDirs};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// How strict each network setting is: a request may only move down this list.
fn network_rank(network: SandboxNetwork) -> u8 {
    match network {
        SandboxNetwork::All => 0,
        SandboxNetwork::Loopback => 1,
        SandboxNetwork::None => 2,
    }
}

/// Whether `entry` (a `read`/`write` entry) lies inside one of `allowed`'s entries.
fn within(entry: &str, allowed: &[String]) -> bool {
    allowed.iter().any(|outer| {
        entry == outer
            || (outer != "cwd" && entry != "cwd" && Path::new(entry).starts_with(outer.as_str()))
    })
}

/// The policy a request runs under: the operator's, tightened by the request. `Ok(None)`: no
/// sandbox. An error says which field would loosen the operator's policy, and what is
/// allowed.
pub fn effective(
    operator: &SandboxConfig,
    request: Option<&SandboxRequest>,
) -> Result<Option<SandboxConfig>, String> {
    let Some(request) = request else {
        return Ok(operator.enabled.then(|| operator.clone()));
    };
    let mut policy = operator.clone();
    match request.enabled {
        Some(false) if operator.enabled => {
            return Err(
                "sandbox.enabled = false: the operator's sandbox is on (sandbox.enabled); a \
                 request may only tighten it"
                    .into(),
            )
        }
        Some(on) => policy.enabled = on,
        None => {}
    }
    if !policy.enabled {
        return Ok(None);
    }
    let tighten_flag = |name: &str, operator: bool, asked: Option<bool>| match asked {
        Some(false) if operator => Err(format!(
            "sandbox.{name} = false: the operator set it to true; a request may only tighten it"
        )),
        Some(asked) => Ok(asked),
        None => Ok(operator),
    };
    policy.required = tighten_flag("required", operator.required, request.required)?;
    policy.network_namespace = tighten_flag(
        "network_namespace",
        operator.network_namespace,
        request.network_namespace,
    )?;
    policy.confine_unix_connect = tighten_flag(
        "confine_unix_connect",
        operator.confine_unix_connect,
        request.confine_unix_connect,
    )?;
    if let Some(word) = &request.network {
        let asked = SandboxNetwork::parse(word).ok_or_else(|| {
            format!("sandbox.network = {word:?}: expected one of \"none\", \"loopback\", \"all\"")
        })?;
        if network_rank(asked) < network_rank(operator.network) {
            return Err(format!(
                "sandbox.network = \"{}\": the operator allows at most \"{}\"; a request may only \
                 tighten it",
                asked.as_str(),
                operator.network.as_str()
            ));
        }
        policy.network = asked;
    }
    for (name, asked, allowed) in [
        ("read", &request.read, &operator.read),
        ("write", &request.write, &operator.write),
    ] {
        let Some(asked) = asked else { continue };
        if let Some(bad) = asked
            .iter()
            .find(|e| !cellvisor_config::keys::is_sandbox_path(e))
        {
            return Err(format!(
                "sandbox.{name}: {bad:?} is not an allowed entry: use absolute paths, \"~/...\" \
                 or \"cwd\""
            ));
        }
        if let Some(bad) = asked.iter().find(|e| !within(e, allowed)) {
            return Err(format!(
                "sandbox.{name}: {bad:?} is outside the operator's {name} list ({}); a request \
                 may only tighten it",
                allowed.join(", ")
            ));
        }
        let list = asked.clone();
        match name {
            "read" => policy.read = list,
            _ => policy.write = list,
        }
    }
    Ok(Some(policy))
}

/// What the kernel offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelSupport {
    /// The Landlock ABI; 0 when Landlock is missing or disabled.
    pub landlock_abi: u32,
    pub user_namespaces: bool,
}

impl KernelSupport {
    /// This machine's (asked once per plan: cheap syscalls and one file).
    pub fn detect() -> KernelSupport {
        KernelSupport {
            landlock_abi: landlock_abi(),
            user_namespaces: user_namespaces(),
        }
    }

    fn has(&self, feature: Feature) -> bool {
        match feature.abi() {
            Some(abi) => self.landlock_abi >= abi,
            None => self.user_namespaces,
        }
    }
}

/// The kernel's Landlock ABI version. The landlock crate keeps its version query private (it
/// wants programs to ask for features, not versions); the supervisor needs the number to plan
/// and to show it, and asking costs one syscall that creates nothing.
fn landlock_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute and size 0 this only returns the ABI version (or -1).
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(version).unwrap_or(0)
}

/// Whether this user can make user namespaces (a limit of 0 turns them off).
fn user_namespaces() -> bool {
    std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .is_some_and(|max| max > 0)
}

/// A policy checked against the kernel: what is enforced, and what is not (with a warning).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub policy: SandboxConfig,
    pub kernel: KernelSupport,
    pub enforced: Vec<Feature>,
    /// Asked for but not enforced (the policy is not `required`).
    pub missing: Vec<Feature>,
    /// The directory `cwd` in the policy stands for.
    pub cwd: PathBuf,
    /// The daemon's own directories and secret files (state, runtime and artifact
    /// directories, token and key files): carved out of every read and write rule, whatever
    /// the policy lists, so no cell reads them at any level.
    pub hidden: Vec<PathBuf>,
    /// The `landlock` isolation level's policy, not the operator's or a request's sandbox.
    pub by_level: bool,
    /// The session's own workspace, where it lies inside one of the [`Plan::hidden`]
    /// directories (the default root is under the state directory): granted after the carve
    /// out, as the session's other directories are. The workspace itself, not the cwd a
    /// client named inside it: its path is the daemon's own directories down to it, so no
    /// cell can swap a link into it between the check and the grant.
    pub workspace: Option<PathBuf>,
}

/// The policy of the `landlock` isolation level: the whole file system readable but for the
/// daemon's own files ([`Plan::hidden`], carved out when the rules are built), the cwd and
/// the session's own directories writable, the network as it is, signals and abstract
/// sockets scoped to the worker. Not `required`: a kernel short of some feature confines
/// what it can, with a warning.
pub fn isolation_policy(operator: &SandboxConfig) -> SandboxConfig {
    SandboxConfig {
        enabled: true,
        required: false,
        read: vec!["/".into()],
        write: vec!["cwd".into()],
        network: SandboxNetwork::All,
        network_namespace: false,
        confine_unix_connect: false,
        tmp_max: operator.tmp_max,
    }
}

/// The first of `hidden` that `path` lies in (or is), if any.
pub fn inside_hidden<'a>(path: &Path, hidden: &'a [PathBuf]) -> Option<&'a PathBuf> {
    hidden.iter().find(|h| path.starts_with(h))
}

/// What `policy` asks for.
fn features(policy: &SandboxConfig) -> Vec<Feature> {
    let mut wanted = vec![Feature::Files, Feature::Scopes];
    if policy.network == SandboxNetwork::None {
        wanted.push(Feature::Tcp);
    }
    if policy.network == SandboxNetwork::Loopback || policy.network_namespace {
        wanted.push(Feature::NetworkNamespace);
    }
    if policy.confine_unix_connect {
        wanted.push(Feature::UnixConnect);
    }
    wanted.sort();
    wanted
}

/// Checks `policy` against `kernel`: a `required` policy the kernel cannot wholly enforce is
/// an error naming each missing feature and the ABI it needs.
pub fn plan(policy: SandboxConfig, kernel: KernelSupport, cwd: PathBuf) -> Result<Plan, String> {
    let (enforced, missing): (Vec<Feature>, Vec<Feature>) =
        features(&policy).into_iter().partition(|f| kernel.has(*f));
    if policy.required && !missing.is_empty() {
        let what: Vec<String> = missing
            .iter()
            .map(|f| match f.abi() {
                Some(abi) => format!("{} needs Landlock ABI {abi}", f.describe()),
                None => format!("{} needs user namespaces, which are off", f.describe()),
            })
            .collect();
        return Err(format!(
            "the sandbox is required (sandbox.required) but this kernel cannot enforce it: {}; \
             this kernel has Landlock ABI {}. No worker was started.",
            what.join("; "),
            kernel.landlock_abi
        ));
    }
    Ok(Plan {
        policy,
        kernel,
        enforced,
        missing,
        cwd,
        hidden: Vec::new(),
        by_level: false,
        workspace: None,
    })
}

impl Plan {
    /// The warning for the log and `status`, when something asked for is not enforced.
    pub fn warning(&self) -> Option<String> {
        if self.missing.is_empty() {
            return None;
        }
        let what: Vec<&str> = self.missing.iter().map(|f| f.describe()).collect();
        Some(format!(
            "sandbox not fully enforced on this kernel (Landlock ABI {}): no {}",
            self.kernel.landlock_abi,
            what.join(", no ")
        ))
    }

    /// What `status` shows.
    pub fn status(&self) -> SandboxStatus {
        SandboxStatus {
            landlock_abi: self.kernel.landlock_abi,
            enforced: self.enforced.clone(),
            network: self.policy.network.as_str().to_string(),
            warning: self.warning(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn operator() -> SandboxConfig {
        SandboxConfig {
            enabled: true,
            write: vec!["cwd".into(), "/data".into()],
            network: SandboxNetwork::Loopback,
            ..SandboxConfig::default()
        }
    }

    #[test]
    fn no_request_fields_keep_the_operators_policy() {
        assert_eq!(effective(&operator(), None), Ok(Some(operator())));
        assert_eq!(effective(&SandboxConfig::default(), None), Ok(None));
    }

    #[test]
    fn a_request_may_turn_the_sandbox_on_and_tighten_each_field() {
        let request = SandboxRequest {
            enabled: Some(true),
            required: Some(true),
            network: Some("none".into()),
            write: Some(vec!["/data/run".into(), "cwd".into()]),
            confine_unix_connect: Some(true),
            ..SandboxRequest::default()
        };
        let policy = effective(&operator(), Some(&request))
            .expect("tighter")
            .expect("on");
        assert!(policy.required && policy.confine_unix_connect);
        assert_eq!(policy.network, SandboxNetwork::None);
        assert_eq!(policy.write, ["/data/run", "cwd"]);
        let off_by_default = SandboxConfig::default();
        let turn_on = SandboxRequest {
            enabled: Some(true),
            ..SandboxRequest::default()
        };
        let on = effective(&off_by_default, Some(&turn_on))
            .expect("turning it on tightens")
            .expect("on");
        assert!(on.enabled);
        assert_eq!(on.network, SandboxNetwork::None, "the operator's defaults");
    }

    #[test]
    fn a_request_that_would_loosen_the_policy_is_refused_with_the_field_named() {
        let refuse = |request: SandboxRequest, field: &str| {
            let error = effective(&operator(), Some(&request)).expect_err("loosens");
            assert!(error.contains(field), "{error}");
            assert!(error.contains("only tighten"), "{error}");
        };
        refuse(
            SandboxRequest {
                enabled: Some(false),
                ..Default::default()
            },
            "sandbox.enabled",
        );
        refuse(
            SandboxRequest {
                network: Some("all".into()),
                ..Default::default()
            },
            "sandbox.network",
        );
        refuse(
            SandboxRequest {
                write: Some(vec!["/home".into()]),
                ..Default::default()
            },
            "sandbox.write",
        );
        refuse(
            SandboxRequest {
                read: Some(vec!["/root/.ssh".into()]),
                ..Default::default()
            },
            "sandbox.read",
        );
        let strict = SandboxConfig {
            required: true,
            ..operator()
        };
        let error = effective(
            &strict,
            Some(&SandboxRequest {
                required: Some(false),
                ..Default::default()
            }),
        )
        .expect_err("loosens");
        assert!(error.contains("sandbox.required"), "{error}");
        let error = effective(
            &operator(),
            Some(&SandboxRequest {
                network: Some("some".into()),
                ..Default::default()
            }),
        )
        .expect_err("unknown word");
        assert!(error.contains("\"none\", \"loopback\", \"all\""), "{error}");
    }

    const ABI7: KernelSupport = KernelSupport {
        landlock_abi: 7,
        user_namespaces: true,
    };

    #[test]
    fn a_required_policy_the_kernel_cannot_enforce_names_the_feature_and_abi() {
        let policy = SandboxConfig {
            required: true,
            confine_unix_connect: true,
            ..operator()
        };
        let error = plan(policy.clone(), ABI7, "/w".into()).expect_err("ABI 9 needed");
        assert!(error.contains("sandbox.confine-unix-connect"), "{error}");
        assert!(error.contains("Landlock ABI 9"), "{error}");
        assert!(error.contains("this kernel has Landlock ABI 7"), "{error}");
        let no_landlock = KernelSupport {
            landlock_abi: 0,
            user_namespaces: false,
        };
        let error = plan(
            SandboxConfig {
                required: true,
                ..SandboxConfig::default()
            },
            no_landlock,
            "/w".into(),
        )
        .expect_err("nothing");
        assert!(error.contains("needs Landlock ABI 1"), "{error}");
        assert!(error.contains("needs Landlock ABI 4"), "{error}");
    }

    #[test]
    fn an_optional_policy_runs_with_what_the_kernel_has_and_a_warning() {
        let policy = SandboxConfig {
            confine_unix_connect: true,
            ..SandboxConfig::default()
        };
        let plan = plan(policy, ABI7, "/w".into()).expect("not required");
        assert_eq!(
            plan.enforced,
            [Feature::Files, Feature::Tcp, Feature::Scopes]
        );
        assert_eq!(plan.missing, [Feature::UnixConnect]);
        let warning = plan.warning().expect("warns");
        assert!(warning.contains("ABI 7") && warning.contains("confine-unix-connect"));
        assert_eq!(plan.status().short(), "abi 7: files,tcp,signals (partial)");
    }
}
