//! The configuration schema. Keys are kebab-case in the file; every key has a default, so an
//! empty file (or none) is a valid configuration.

use bytesize::ByteSize;
use std::path::PathBuf;
use std::time::Duration;

pub use crate::durability::EveryCellAnswer;
pub use crate::workspaces::WorkspacesConfig;

/// Everything an operator can tune.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    /// `[sessions]`: how many, how long idle, how workers are watched.
    pub sessions: SessionsConfig,
    /// `[cells]`: timeouts of one cell.
    pub cells: CellsConfig,
    /// `[output]`: how much of a cell's output a host gets.
    pub output: OutputConfig,
    /// `[limits]`: resource limits of each worker process.
    pub limits: LimitsConfig,
    /// `[env]`: what workers inherit from the daemon's environment.
    pub env: EnvConfig,
    /// `[python]`: which interpreter, prewarmed workers.
    pub python: PythonConfig,
    /// `[js]`: the QuickJS engine's memory and stack.
    pub js: EngineConfig,
    /// `[lua]`: the Lua engine's memory and stack.
    pub lua: EngineConfig,
    /// `[daemon]`: the socket, the log, idle exit.
    pub daemon: DaemonConfig,
    /// `[startup]`: modules every new worker runs first.
    pub startup: StartupConfig,
    /// `[sandbox]`: Landlock and network confinement of workers.
    pub sandbox: SandboxConfig,
    /// `[snapshots]`: sessions' namespaces saved when their workers stop, restored after.
    pub snapshots: SnapshotsConfig,
    /// `[fleet]`: leases that keep a session on one node of many sharing a snapshot directory.
    pub fleet: FleetConfig,
    /// `[isolation]`: who a cell is: a uid leased per session, or the daemon's own.
    pub isolation: IsolationConfig,
    /// `[workspaces]`: each session's own directory of files, and its quotas.
    pub workspaces: WorkspacesConfig,
}

/// Lifetimes of sessions and their workers.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionsConfig {
    /// Live workers per language; a new session over the cap evicts the least recently used
    /// idle one.
    pub max_sessions: usize,
    /// A session idle this long is shut down; 0 keeps sessions forever.
    pub idle_timeout: Duration,
    /// How often idle sessions are looked for.
    pub sweep_interval: Duration,
    /// How often workers are pinged; a missed pong is how a hung worker is found.
    pub heartbeat_interval: Duration,
    /// No pong for this long and the worker is declared dead.
    pub heartbeat_timeout: Duration,
    /// Unplanned worker replacements allowed before the session is `failed`; a successful cell
    /// refills it.
    pub restart_budget: u32,
    /// How long an interrupted cell may take to stop before its worker is killed.
    pub interrupt_grace: Duration,
    /// How long a worker may take to exit after `Shutdown` before it is signalled.
    pub shutdown_grace: Duration,
    /// How long a new worker may take to connect and say hello.
    pub start_timeout: Duration,
    /// Whether a session keeps its workers between requests, or each request gets new ones.
    pub mode: SessionMode,
    /// What names a session's state: its name alone, or its name and the request's directory
    /// (so a host gives each project its own state under one session name).
    pub key: SessionKeyBy,
}

/// `sessions.key`: what a session's state is keyed by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SessionKeyBy {
    /// The session name alone: every directory shares the session's state.
    #[default]
    Session,
    /// The pair (session name, canonical cwd): each directory has its own state.
    SessionCwd,
}

impl SessionKeyBy {
    /// The word the config file uses.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionKeyBy::Session => "session",
            SessionKeyBy::SessionCwd => "session+cwd",
        }
    }
}

/// `sessions.mode`: what a request's cells run on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SessionMode {
    /// Workers (and their state) live on between requests of a session.
    #[default]
    Session,
    /// Every request runs on new workers (prewarmed ones where available), discarded after.
    PerCall,
}

impl SessionMode {
    /// The word the config file uses.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionMode::Session => "session",
            SessionMode::PerCall => "per-call",
        }
    }
}

impl Default for SessionsConfig {
    fn default() -> Self {
        SessionsConfig {
            max_sessions: 4,
            idle_timeout: Duration::from_secs(300),
            sweep_interval: Duration::from_secs(30),
            heartbeat_interval: Duration::from_secs(5),
            heartbeat_timeout: Duration::from_secs(10),
            restart_budget: 1,
            interrupt_grace: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(2),
            start_timeout: Duration::from_secs(15),
            mode: SessionMode::Session,
            key: SessionKeyBy::Session,
        }
    }
}

/// Cell timeouts, in seconds as requests give them.
#[derive(Debug, Clone, PartialEq)]
pub struct CellsConfig {
    /// The timeout of a cell that names none.
    pub default_timeout: Duration,
    /// Shorter timeouts are raised to this, so a cell has time to start.
    pub min_timeout: Duration,
    /// Longer timeouts are lowered to this, so no cell holds its worker forever.
    pub max_timeout: Duration,
    /// Cells one request may hold; a longer request is refused before anything runs.
    pub max_cells_per_request: usize,
    /// Results of background cells that ended unobserved a session keeps for `wait`: bounded
    /// so an agent that never collects cannot grow the daemon; past it the oldest is dropped.
    pub max_uncollected: usize,
}

impl Default for CellsConfig {
    fn default() -> Self {
        CellsConfig {
            default_timeout: Duration::from_secs(30),
            min_timeout: Duration::from_secs(1),
            max_timeout: Duration::from_secs(600),
            max_cells_per_request: 10_000,
            max_uncollected: 16,
        }
    }
}

impl CellsConfig {
    /// The timeout for a cell that asked for `requested` seconds (or nothing), within range.
    pub fn timeout_for(&self, requested: Option<f64>) -> Duration {
        let max = self.max_timeout.max(self.min_timeout);
        let wanted = match requested {
            // Clamped in seconds first: a huge number must not overflow a Duration.
            Some(secs) if secs.is_finite() && secs > 0.0 => {
                Duration::from_secs_f64(secs.min(max.as_secs_f64()))
            }
            _ => self.default_timeout,
        };
        wanted.clamp(self.min_timeout, max)
    }
}

/// How much of a cell's output is kept in memory; the rest spills to an artifact file.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputConfig {
    /// Output past this many bytes goes to an artifact file instead of the result.
    pub max_bytes: ByteSize,
    /// Output past this many lines goes to an artifact file instead of the result.
    pub max_lines: usize,
    /// Where spilled outputs go; default: `artifacts/` in the runtime directory.
    pub artifact_dir: Option<PathBuf>,
    /// Spilled outputs older than this are deleted; zero keeps them.
    pub artifact_max_age: Duration,
    /// Longer text lines are cut in the returned output (the artifact keeps them whole).
    pub max_line_length: usize,
    /// Total size of the artifact directory; the oldest artifacts go first to stay under it.
    pub artifact_max_total: ByteSize,
}

impl Default for OutputConfig {
    fn default() -> Self {
        OutputConfig {
            max_bytes: ByteSize::kib(50),
            max_lines: 3000,
            artifact_dir: None,
            artifact_max_age: Duration::from_secs(24 * 60 * 60),
            max_line_length: 4000,
            artifact_max_total: ByteSize::gib(1),
        }
    }
}

/// OS limits applied to every worker before it runs user code, and the RSS cap.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LimitsConfig {
    /// `RLIMIT_AS` of each worker; unset = no limit.
    pub address_space: Option<ByteSize>,
    /// `RLIMIT_CPU` of each worker (a process's whole life, not one cell); unset = no limit.
    pub cpu_time: Option<Duration>,
    /// `RLIMIT_NOFILE` of each worker; unset = no limit.
    pub open_files: Option<u64>,
    /// `RLIMIT_NPROC` of each worker; unset = no limit.
    pub processes: Option<u64>,
    /// `RLIMIT_FSIZE` of each worker; unset = no limit.
    pub file_size: Option<ByteSize>,
    /// The supervisor restarts a worker whose process tree's resident memory passes this.
    pub max_rss: Option<ByteSize>,
}

/// The environment workers see.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EnvConfig {
    /// Extra variables (or `PREFIX_*` patterns) passed through besides the built-in allowlist.
    pub allow: Vec<String>,
    /// Extra variables (or patterns) always removed, even if allowed.
    pub deny: Vec<String>,
    /// Fixed values set in every worker.
    pub set: std::collections::BTreeMap<String, String>,
}

/// The Python runtime.
#[derive(Debug, Clone, PartialEq)]
pub struct PythonConfig {
    /// False: Python cells fail at once, naming this key.
    pub enabled: bool,
    /// Interpreter path or name; discovery order is VIRTUAL_ENV, `<cwd>/.venv`, `<cwd>/venv`,
    /// this, then `python3` on PATH.
    pub interpreter: Option<String>,
    /// Idle Python workers kept started ahead of demand.
    pub prewarm: usize,
    /// New Python workers are forked from a warm interpreter (a zygote) rather than started.
    pub zygote: bool,
    /// Modules a zygote imports before it forks, so each session finds them imported.
    pub preload: Vec<String>,
    /// Which shell runs the cells: IPython's own where the interpreter has it, or the
    /// built-in emulation.
    pub shell: PythonShell,
}

/// `python.shell`: what runs a Python session's cells.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PythonShell {
    /// IPython's InteractiveShell when the interpreter can import IPython, else the built-in
    /// emulation.
    #[default]
    Auto,
    /// IPython's InteractiveShell; without IPython, the emulation, with a notice saying why.
    Ipython,
    /// cellvisor's built-in emulation of IPython's notebook habits, always.
    Builtin,
}

impl PythonShell {
    /// The word the config file uses (and the worker reads).
    pub fn as_str(self) -> &'static str {
        match self {
            PythonShell::Auto => "auto",
            PythonShell::Ipython => "ipython",
            PythonShell::Builtin => "builtin",
        }
    }
}

impl Default for PythonConfig {
    fn default() -> Self {
        PythonConfig {
            enabled: true,
            interpreter: None,
            prewarm: 1,
            zygote: true,
            preload: Vec::new(),
            shell: PythonShell::Auto,
        }
    }
}

/// An in-process engine's own limits (QuickJS, Lua).
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    /// False: this language's cells fail at once, naming this key.
    pub enabled: bool,
    /// The engine's heap cap; a cell that allocates past it fails instead of the worker.
    pub memory_limit: Option<ByteSize>,
    /// The engine's stack cap; deep recursion fails as an error instead of crashing.
    pub stack_size: Option<ByteSize>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            enabled: true,
            memory_limit: None,
            stack_size: None,
        }
    }
}

/// Startup modules: files every worker runs after its prelude, at each start.
#[derive(Debug, Clone, PartialEq)]
pub struct StartupConfig {
    /// Load `$XDG_CONFIG_HOME/cellvisor/startup/*.{py,js,lua}`.
    pub user: bool,
    /// Load `<cwd>/.cellvisor/startup/*.{py,js,lua}` (overriding user files of the same name).
    pub project: bool,
}

impl Default for StartupConfig {
    fn default() -> Self {
        StartupConfig {
            user: true,
            project: true,
        }
    }
}

/// The background daemon.
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonConfig {
    /// The daemon's socket; unset = the per-user default.
    pub socket: Option<PathBuf>,
    /// An auto-started daemon exits after this long with no sessions; 0 = never.
    pub idle_exit: Duration,
    /// The daemon's log file; unset = next to the socket.
    pub log: Option<PathBuf>,
    /// Requests one connection may have unanswered; past it the daemon stops reading that
    /// connection until answers go out.
    pub max_pending_requests: usize,
    /// A connection whose client reads none of its answers for this long, while the daemon
    /// waits to send them, is dropped.
    pub stalled_client_timeout: Duration,
    /// Network listeners beside the Unix socket (`tcp://<ip>:<port>`); empty = none.
    pub listen: Vec<String>,
    /// The listeners' certificate chain (PEM); with `tls_key`, they speak TLS.
    pub tls_cert: Option<PathBuf>,
    /// The private key of `tls_cert` (PEM).
    pub tls_key: Option<PathBuf>,
    /// CA certificates (PEM) a client's certificate must chain to (mutual TLS); unset = no
    /// client certificate is asked for.
    pub client_ca: Option<PathBuf>,
    /// The bearer token every network request but `/healthz` must carry; required when
    /// `listen` is set.
    pub token_file: Option<PathBuf>,
    /// A TOML file of tenants (`[[tenants]]`: name, token files, rights, quotas) that
    /// replaces `token_file` with one credential per tenant; unset = `token_file`'s one
    /// tenant with every right.
    pub tenants_file: Option<PathBuf>,
    /// Allow a listener on a non-loopback address without TLS.
    pub insecure_plaintext: bool,
    /// This daemon's name in results, `status` and metrics; unset = the host name.
    pub node: Option<String>,
    /// Authenticated network connections held at once; past it a request with the token gets
    /// 503.
    pub max_network_connections: usize,
    /// Connections that have not yet presented the token, at once (apart from the others).
    pub max_unauthenticated_connections: usize,
    /// Unauthenticated connections from one IP address, at once.
    pub max_connections_per_address: usize,
    /// How long a new connection has to present its headers and token.
    pub unauthenticated_timeout: Duration,
    /// The most a request's headers may take (hyper's read buffer).
    pub max_header_bytes: ByteSize,
    /// While draining, a session that was busy when the drain began is stopped once it has
    /// been idle this long (so an agent's next cell still runs there).
    pub drain_idle: Duration,
    /// How many recent `request_id`s each session remembers with their answers, so a retry
    /// is answered without running again.
    pub request_memory: usize,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            socket: None,
            idle_exit: Duration::from_secs(15 * 60),
            log: None,
            max_pending_requests: 1024,
            stalled_client_timeout: Duration::from_secs(60),
            listen: Vec::new(),
            tls_cert: None,
            tls_key: None,
            client_ca: None,
            token_file: None,
            tenants_file: None,
            insecure_plaintext: false,
            node: None,
            max_network_connections: 1024,
            max_unauthenticated_connections: 256,
            max_connections_per_address: 64,
            unauthenticated_timeout: Duration::from_secs(5),
            max_header_bytes: ByteSize::kib(16),
            drain_idle: Duration::from_secs(10),
            request_memory: 256,
        }
    }
}

/// `[sandbox]`: Landlock confinement of every worker (opt-in). Requests may only tighten it.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxConfig {
    /// Confine every worker; off by default because it changes what cells can do.
    pub enabled: bool,
    /// Refuse to start workers when the kernel cannot enforce the whole policy, instead of
    /// starting them with a warning.
    pub required: bool,
    /// Read-only trees besides the interpreter's own (`/usr`, `/etc` minus its secrets, ...).
    pub read: Vec<String>,
    /// Read-write trees: `"cwd"` (the session's directory) or paths; the session's temp,
    /// artifact and store directories are always writable.
    pub write: Vec<String>,
    /// Which network the cells reach (`none`, `loopback`, `all`).
    pub network: SandboxNetwork,
    /// Also move each worker into a network namespace of its own (needs user namespaces),
    /// which cuts UDP and every other protocol from the outside.
    pub network_namespace: bool,
    /// Also confine `connect` on named Unix sockets to the write paths (Landlock ABI 9).
    pub confine_unix_connect: bool,
    /// The most a sandboxed session's temporary directory may hold after a cell (per language).
    pub tmp_max: ByteSize,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            enabled: false,
            required: false,
            read: DEFAULT_SANDBOX_READ.iter().map(|p| p.to_string()).collect(),
            write: vec!["cwd".to_string()],
            network: SandboxNetwork::None,
            network_namespace: false,
            confine_unix_connect: false,
            tmp_max: ByteSize::gib(1),
        }
    }
}

/// The read-only trees of `sandbox.read` by default: what interpreters and the tools cells
/// start (sh, git, ...) need. `/etc` loses its secrets when the rules are built.
pub const DEFAULT_SANDBOX_READ: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt", "/proc", "/sys", "/dev",
];

/// `sandbox.network`: what TCP a confined cell may use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum SandboxNetwork {
    /// No TCP `connect` or `bind` at all (Landlock, ABI 4).
    #[default]
    None,
    /// A network namespace of the worker's own: its loopback only (needs user namespaces).
    Loopback,
    /// No network rule.
    All,
}

impl SandboxNetwork {
    /// The word the config file uses.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxNetwork::None => "none",
            SandboxNetwork::Loopback => "loopback",
            SandboxNetwork::All => "all",
        }
    }

    /// The value for a word of the config file.
    pub fn parse(word: &str) -> Option<SandboxNetwork> {
        match word {
            "none" => Some(SandboxNetwork::None),
            "loopback" => Some(SandboxNetwork::Loopback),
            "all" => Some(SandboxNetwork::All),
            _ => None,
        }
    }
}

/// `[snapshots]`: a session's namespace is saved when its worker stops and restored on the
/// next cell, so eviction frees the memory, not the work (docs/snapshots.md).
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotsConfig {
    /// When snapshots are written.
    pub when: SnapshotWhen,
    /// A namespace bigger than this (per session and language) is not saved; the eviction
    /// notice says so.
    pub max_size: ByteSize,
    /// How long writing or reading one snapshot may take before the worker is stopped
    /// without it.
    pub timeout: Duration,
    /// A snapshot unused this long is deleted by the sweep.
    pub ttl: Duration,
    /// The snapshot directory's total size; over it the oldest snapshots are deleted first.
    pub max_total: ByteSize,
    /// Where snapshots live; by default `$XDG_STATE_HOME/cellvisor/snapshots`.
    pub dir: Option<PathBuf>,
    /// The master integrity key, shared by a fleet's nodes so each verifies what another
    /// wrote; unset: `<dir>/.key`, made by this daemon.
    pub key_file: Option<PathBuf>,
    /// In etcd mode, whether an `every-cell` cell's answer waits for its state's commit.
    pub every_cell_answer: EveryCellAnswer,
}

impl Default for SnapshotsConfig {
    fn default() -> Self {
        SnapshotsConfig {
            when: SnapshotWhen::OnStop,
            max_size: ByteSize::mib(256),
            timeout: Duration::from_secs(60),
            ttl: Duration::from_secs(7 * 24 * 3600),
            max_total: ByteSize::gib(8),
            dir: None,
            key_file: None,
            every_cell_answer: EveryCellAnswer::Committed,
        }
    }
}

/// `snapshots.when`: which stops of a worker save its namespace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SnapshotWhen {
    /// Never: a worker's state ends with it.
    Never,
    /// Before every planned stop: idle or LRU eviction, a memory recycle, a reload's
    /// replacement, the daemon's stop.
    #[default]
    OnStop,
    /// Also after every successful cell, so a crash loses only the cell that crashed (or
    /// the one just answered, while its save is written).
    EveryCell,
}

impl SnapshotWhen {
    /// The word the config file uses.
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotWhen::Never => "never",
            SnapshotWhen::OnStop => "on-stop",
            SnapshotWhen::EveryCell => "every-cell",
        }
    }

    /// The value for a word of the config file.
    pub fn parse(word: &str) -> Option<SnapshotWhen> {
        match word {
            "never" => Some(SnapshotWhen::Never),
            "on-stop" => Some(SnapshotWhen::OnStop),
            "every-cell" => Some(SnapshotWhen::EveryCell),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_clamped_to_the_configured_range() {
        let cells = CellsConfig::default();
        assert_eq!(cells.timeout_for(None), Duration::from_secs(30));
        assert_eq!(cells.timeout_for(Some(0.2)), Duration::from_secs(1));
        assert_eq!(cells.timeout_for(Some(5.0)), Duration::from_secs(5));
        assert_eq!(cells.timeout_for(Some(1e9)), Duration::from_secs(600));
        assert_eq!(cells.timeout_for(Some(f64::NAN)), Duration::from_secs(30));
        assert_eq!(cells.timeout_for(Some(1e300)), Duration::from_secs(600));
        assert_eq!(cells.timeout_for(Some(f64::MAX)), Duration::from_secs(600));
    }
}

/// `[fleet]`: several nodes sharing one snapshot directory (docs/fleet.md). A node takes a
/// lease on each session it runs, so two nodes never run one session, and a dead node's
/// sessions may be restored elsewhere once its leases expire.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetConfig {
    /// Where each session's lease is taken before it runs here: nowhere, a file in
    /// `<snapshots.dir>/.leases`, or etcd.
    pub leases: LeaseStore,
    /// How long a lease lasts unless renewed (renewed every third of it while the session
    /// lives): the time a dead node's sessions wait before another node may restore them.
    pub lease_ttl: Duration,
    /// TCP addresses answering HAProxy's agent check (`ready`/`drain` and a weight from the
    /// free session slots); empty: none.
    pub agent_listen: Vec<String>,
    /// etcd's client URLs (`leases = "etcd"`).
    pub etcd_endpoints: Vec<String>,
    /// The CA that signed etcd's certificates (PEM).
    pub etcd_ca_file: Option<PathBuf>,
    /// This node's client certificate for etcd (PEM).
    pub etcd_cert_file: Option<PathBuf>,
    /// Its key (PEM).
    pub etcd_key_file: Option<PathBuf>,
    /// etcd's user name, when etcd's authentication is on.
    pub etcd_user: Option<String>,
    /// A file holding that user's password (its first line).
    pub etcd_password_file: Option<PathBuf>,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            leases: LeaseStore::Off,
            lease_ttl: Duration::from_secs(30),
            agent_listen: Vec::new(),
            etcd_endpoints: Vec::new(),
            etcd_ca_file: None,
            etcd_cert_file: None,
            etcd_key_file: None,
            etcd_user: None,
            etcd_password_file: None,
        }
    }
}

/// `fleet.leases`: where a fleet's node takes its session leases.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LeaseStore {
    /// No leases: the node is no fleet's (`false`).
    #[default]
    Off,
    /// Lease files in the shared snapshot directory (`true` or `"file"`): one host, or
    /// machines that never pause; a paused holder does not know it lost its lease.
    File,
    /// Leases in etcd, fenced by their creating revision (`"etcd"`), with the snapshots
    /// behind fenced pointers.
    Etcd,
}

impl LeaseStore {
    /// Whether the node takes leases at all.
    pub fn is_on(self) -> bool {
        self != LeaseStore::Off
    }
}

/// `[isolation]`: the identity each session's workers run as (docs/hardening.md).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IsolationConfig {
    /// Which level is asked for; `auto` takes the strongest this daemon can enforce.
    pub level: IsolationLevel,
    /// The uids (and gids of the same numbers) leased to sessions, one per live session; no
    /// account of the machine may use them ([`UidRange::DEFAULT`] unless set).
    pub uids: UidRange,
}

/// `isolation.level`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum IsolationLevel {
    /// `uid` where the daemon may change uids, serves clients other than its own user and no
    /// account uses `isolation.uids`; otherwise `landlock` for sessions served on the network
    /// and unconfined local ones.
    #[default]
    Auto,
    /// Every worker runs as its session's leased uid; a daemon that cannot change uids
    /// refuses to start.
    Uid,
    /// Workers run as the daemon's user, every session confined by Landlock away from the
    /// daemon's directories and secret files (`none` where the kernel has no Landlock).
    Landlock,
    /// Workers run as the daemon's user (the sandbox and the peer checks still apply).
    None,
}

impl IsolationLevel {
    /// The word the config file uses.
    pub fn as_str(self) -> &'static str {
        match self {
            IsolationLevel::Auto => "auto",
            IsolationLevel::Uid => "uid",
            IsolationLevel::Landlock => "landlock",
            IsolationLevel::None => "none",
        }
    }

    /// The value for a word of the config file.
    pub fn parse(word: &str) -> Option<IsolationLevel> {
        match word {
            "auto" => Some(IsolationLevel::Auto),
            "uid" => Some(IsolationLevel::Uid),
            "landlock" => Some(IsolationLevel::Landlock),
            "none" => Some(IsolationLevel::None),
            _ => None,
        }
    }
}

/// A range of uids, `first..=last`, written `"61000-61999"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UidRange {
    /// The lowest uid of the range.
    pub first: u32,
    /// The highest uid of the range (included).
    pub last: u32,
}

impl Default for UidRange {
    fn default() -> Self {
        UidRange::DEFAULT
    }
}

impl UidRange {
    /// The default range: the uids systemd leaves unused between its greeter range
    /// (60578-60705) and its `DynamicUser` range (61184-65519), above login.defs' `UID_MAX`
    /// (60000), so no account made by `useradd` or systemd can hold one.
    pub const DEFAULT: UidRange = UidRange {
        first: 60706,
        last: 61183,
    };

    /// The lowest uid a range may start at: below it lie the system's own accounts.
    pub const MIN: u32 = 1000;
    /// The highest uid a range may reach: above it lie `nobody` (65534) and the uids the
    /// kernel reserves ((uid_t) -1).
    pub const MAX: u32 = 65533;

    /// Reads `"FIRST-LAST"`; the error says what was wrong and what is allowed.
    pub fn parse(text: &str) -> Result<UidRange, String> {
        let expected = format!(
            "expected \"FIRST-LAST\" with {} <= FIRST <= LAST <= {}, like \"61000-61999\"",
            UidRange::MIN,
            UidRange::MAX
        );
        let (first, last) = text
            .trim()
            .split_once('-')
            .and_then(|(a, b)| Some((a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?)))
            .ok_or_else(|| format!("cannot read {text:?} as a uid range ({expected})"))?;
        if first < UidRange::MIN || last > UidRange::MAX || first > last {
            return Err(format!("{text:?} is not an allowed uid range ({expected})"));
        }
        Ok(UidRange { first, last })
    }

    /// How many uids it holds.
    pub fn len(&self) -> u32 {
        self.last - self.first + 1
    }

    /// Never: a range holds at least one uid.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether `uid` lies in it.
    pub fn contains(&self, uid: u32) -> bool {
        (self.first..=self.last).contains(&uid)
    }
}

impl std::fmt::Display for UidRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}
