//! The table itself: every key, one `key!` line each, with its kind, range, apply time and
//! documentation.

use super::field::{optional, Field};
use super::kind::{GIB, KIB, MIB};
use super::AppliesWhen::{AtOnce, NewCells, NewConnections, NewWorkers, Restart};
use super::{KeySpec, Kind};
use std::time::Duration;

const DAY: u64 = 24 * 60 * 60;

/// One [`KeySpec`] from its one-line declaration: `key!(section.field as "key-name", kind,
/// applies, "doc")`, `applies` one of the [`AppliesWhen`](super::AppliesWhen) cases. The section is the `Config` field of the same name, whether the key is optional
/// follows from the field's type, and the getter and setter from [`Field`].
macro_rules! key {
    ($section:ident . $field:ident as $key:literal, $kind:expr, $applies:ident, $doc:literal $(,)?) => {
        KeySpec {
            section: stringify!($section),
            key: $key,
            kind: $kind,
            applies: $applies,
            optional: optional(|c| &c.$section.$field),
            doc: $doc,
            get: |c| Field::to_value(&c.$section.$field),
            set: |c, v| {
                if let Some(value) = Field::from_value(v) {
                    c.$section.$field = value;
                }
            },
        }
    };
}

const fn count_in(min: u64, max: u64) -> Kind {
    Kind::Count { min, max }
}

const fn millis(min: u64, max: Duration) -> Kind {
    Kind::Duration {
        min: Duration::from_millis(min),
        max,
    }
}

const fn size_in(min: u64, max: u64) -> Kind {
    Kind::Size { min, max }
}

const HOUR: Duration = Duration::from_secs(3600);
const GRACE: Kind = millis(10, HOUR);

/// Every key, in the order `config show` and the docs list them.
pub static KEYS: &[KeySpec] = &[
    // [sessions]
    key!(sessions.max_sessions as "max-sessions", count_in(1, 10_000), AtOnce,
        "Live workers per language; a new session over the cap evicts the least recently used idle one."),
    key!(sessions.idle_timeout as "idle-timeout", millis(0, Duration::from_secs(30 * DAY)), AtOnce,
        "A session idle this long is shut down; 0 keeps sessions forever."),
    key!(sessions.sweep_interval as "sweep-interval", GRACE, AtOnce,
        "How often idle sessions are looked for."),
    key!(sessions.heartbeat_interval as "heartbeat-interval", GRACE, AtOnce,
        "How often a worker with a cell running is pinged (an idle one is not: it costs the daemon nothing)."),
    key!(sessions.heartbeat_timeout as "heartbeat-timeout", GRACE, AtOnce,
        "No pong for this long and the worker is declared dead; must be longer than heartbeat-interval."),
    key!(sessions.restart_budget as "restart-budget", count_in(0, 100), AtOnce,
        "Unplanned worker replacements under a cell allowed before the session is failed; a successful cell refills it. A worker that dies while no cell runs on it costs nothing."),
    key!(sessions.interrupt_grace as "interrupt-grace", GRACE, NewCells,
        "How long an interrupted cell may take to stop before its worker is killed."),
    key!(sessions.shutdown_grace as "shutdown-grace", GRACE, AtOnce,
        "How long a worker may take to exit after Shutdown before it is signalled."),
    key!(sessions.start_timeout as "start-timeout", millis(100, Duration::from_secs(600)), NewWorkers,
        "How long a new worker may take to connect and say hello."),
    key!(sessions.mode as "mode", Kind::Choice(&["session", "per-call"]), NewCells,
        "`session`: workers and their state live on between requests; `per-call`: every request runs on new workers (prewarmed where available), discarded after."),
    key!(sessions.key as "key", Kind::Choice(&["session", "session+cwd"]), Restart,
        "What names a session's state: `session`, its name alone (every directory shares it); `session+cwd`, the pair of its name and the request's canonical cwd, so each project keeps its own state under one session name (methods other than eval then take an optional `cwd`; see docs/protocol.md)."),
    // [cells]
    key!(cells.default_timeout as "default-timeout", millis(100, Duration::from_secs(DAY)), NewCells,
        "Timeout of a cell that asks for none; must lie between min-timeout and max-timeout."),
    key!(cells.min_timeout as "min-timeout", millis(100, Duration::from_secs(DAY)), NewCells,
        "Shorter requested timeouts are raised to this."),
    key!(cells.max_timeout as "max-timeout", millis(100, Duration::from_secs(DAY)), NewCells,
        "Longer requested timeouts are cut to this."),
    key!(cells.max_cells_per_request as "max-cells-per-request", count_in(1, 1_000_000), NewCells,
        "Cells one request may hold; a longer request is refused before anything runs."),
    key!(cells.max_uncollected as "max-uncollected", count_in(1, 1024), AtOnce,
        "Results of background cells that ended with nobody waiting that a session keeps for `wait`; past it the oldest is dropped, and a `wait` for it says so."),
    // [output]
    key!(output.max_bytes as "max-bytes", size_in(KIB, GIB), NewCells,
        "Output of a cell kept in memory; the rest spills to an artifact file."),
    key!(output.max_lines as "max-lines", count_in(10, 10_000_000), NewCells,
        "Output lines of a cell kept in memory; the rest spills to an artifact file."),
    key!(output.artifact_dir as "artifact-dir", Kind::Path, Restart,
        "Where spilled outputs go; unset: `artifacts/` in the runtime directory."),
    key!(output.artifact_max_age as "artifact-max-age", millis(0, Duration::from_secs(365 * DAY)), AtOnce,
        "Spilled outputs older than this are deleted (the runtime directory is often in memory); 0 keeps them."),
    key!(output.max_line_length as "max-line-length", count_in(80, 10_000_000), NewCells,
        "Text lines longer than this (in characters) are cut in the returned output with a marker; the artifact keeps them whole."),
    key!(output.artifact_max_total as "artifact-max-total", size_in(MIB, u64::MAX), AtOnce,
        "Total size of the artifact directory; the oldest artifacts are deleted to stay under it, and a cell whose output cannot be kept whole says so."),
    // [limits]
    key!(limits.address_space as "address-space", size_in(64 * MIB, u64::MAX), NewWorkers,
        "RLIMIT_AS of every worker; unset: no limit."),
    key!(limits.cpu_time as "cpu-time", millis(1000, Duration::MAX), NewWorkers,
        "RLIMIT_CPU of every worker (CPU time over its whole life); unset: no limit."),
    key!(limits.open_files as "open-files", count_in(16, 1_048_576), NewWorkers,
        "RLIMIT_NOFILE of every worker; unset: inherited."),
    key!(limits.processes as "processes", count_in(1, 1_048_576), NewWorkers,
        "RLIMIT_NPROC of every worker; it counts every process and thread of the user, not a worker's own, so one session's children can starve the others (run the daemon as a dedicated user, or in a cgroup with pids.max, to bound a session alone); unset: inherited."),
    key!(limits.file_size as "file-size", size_in(KIB, u64::MAX), NewWorkers,
        "RLIMIT_FSIZE of every worker: the largest file it may write; unset: no limit."),
    key!(limits.max_rss as "max-rss", size_in(16 * MIB, u64::MAX), AtOnce,
        "A worker whose resident memory (with its children) passes this is killed; checked every 50ms while a cell runs, every heartbeat-interval otherwise; unset: no cap."),
    // [env]
    key!(env.allow as "allow", Kind::Names, NewWorkers,
        "Variables (or `PREFIX_*` patterns) passed to workers besides the built-in allowlist (`PATH`, `HOME`, `USER`, `LOGNAME`, `SHELL`, `LANG`, `LANGUAGE`, `LC_*`, `TERM`, `TZ`, `TMPDIR`, `TEMP`, `TMP`, `XDG_*`, `VIRTUAL_ENV`, `CONDA_PREFIX`, `PYTHONPATH`, `PYENV_*`, `NODE_PATH`, `LUA_PATH`, `LUA_CPATH`, `RUST_LOG`), such as the prefix a host sets for its agents (`MYAPP_*`). The daemon's rules pass the caller's environment too: `cellvisor eval` sends its variables with each request (all but the credentials the built-in denylist names, which never leave the caller; its own `[env]` is not applied) and the daemon filters them with this table, so cells see the caller's variables as the daemon's operator allows them, and a live worker gets a change applied before the next cell, with a notice naming the variables."),
    key!(env.deny as "deny", Kind::Names, NewWorkers,
        "Variables (or patterns like `*_TOKEN`) always removed, besides the built-in denylist (`*TOKEN*`, `*SECRET*`, `*PASSWORD*`, `*PASSWD*`, `*_KEY`, `*_KEY_ID`, `*CREDENTIAL*`, `*AUTH*`, `*_DSN`, `DATABASE_URL`); the denylist wins over every allow rule, only `set` passes a value past it. A name ending in `_URL`, `_URI` or `_ENDPOINT` names a place, not a credential: the built-in patterns that match anywhere (`*TOKEN*`, `*AUTH*`, ...) spare it (`MYAPP_TOKEN_URL`) unless its value carries a password (`scheme://user:password@host`); `DATABASE_URL` and `*_DSN` stay denied."),
    key!(env.set as "set", Kind::Map, NewWorkers,
        "Fixed values set in every worker (not overridable from the environment)."),
    // [python]
    key!(python.enabled as "enabled", Kind::Bool, NewCells,
        "false: Python cells fail at once with a message naming this key."),
    key!(python.interpreter as "interpreter", Kind::Text, NewWorkers,
        "Interpreter path or name, tried after VIRTUAL_ENV, ./.venv and ./venv; unset: python3 on PATH. One that cannot run the runner fails the worker's start naming its path and the cause: it does not exist, is a directory or not executable, is older than Python 3.8, or exited while starting the runner (with what it printed, an import error say)."),
    key!(python.prewarm as "prewarm", count_in(0, 16), AtOnce,
        "Idle Python workers kept started ahead of demand."),
    key!(python.zygote as "zygote", Kind::Bool, NewWorkers,
        "true: new Python workers are forked from a warm interpreter started once per interpreter (a zygote, which has loaded the runner and `preload`), in about a millisecond instead of a full interpreter start; false: every worker starts its own interpreter. Sandboxed sessions always start their own."),
    key!(python.preload as "preload", Kind::Modules, NewWorkers,
        "Modules the zygote imports before it forks, so every new session finds them imported (`import pandas` then costs nothing); one that fails to import is named in the daemon's log, in `cellvisor status` and in the first session's output, and the zygote goes on without it. Forked sessions share the preloaded modules' state at the fork and the hash seed."),
    key!(python.shell as "shell", Kind::Choice(&["auto", "ipython", "builtin"]), NewWorkers,
        "What runs Python cells. `auto`: IPython's own InteractiveShell (what a Jupyter kernel runs, with cellvisor's display, output, stdin refusal, interrupts, snapshots and helpers around it) when the session's interpreter can import IPython, else cellvisor's built-in emulation of IPython's notebook habits; `ipython`: IPython's shell, and without IPython the emulation with a notice saying why; `builtin`: the emulation always (a trivial cell costs the interpreter about a third of the CPU it takes in IPython's shell, 0.3 against 0.9 ms; see docs/cells.md). The zygote imports IPython before it forks, so a forked session does not pay for it; a session says which shell it runs in `status` (its engine), and its first cell's notice says why when it is not the one asked for."),
    // [js]
    key!(js.enabled as "enabled", Kind::Bool, NewCells,
        "false: JavaScript cells fail at once with a message naming this key."),
    key!(js.memory_limit as "memory-limit", size_in(MIB, u64::MAX), NewWorkers,
        "QuickJS heap limit; unset: no limit. It counts the engine's own allocations: a worker's RSS is typically 2-3 times larger (allocator overhead, the engine, the worker itself), so cap processes with limits.max-rss or address-space."),
    key!(js.stack_size as "stack-size", size_in(64 * KIB, u64::MAX), NewWorkers,
        "QuickJS stack limit; unset: the engine's default."),
    // [lua]
    key!(lua.enabled as "enabled", Kind::Bool, NewCells,
        "false: Lua cells fail at once with a message naming this key."),
    key!(lua.memory_limit as "memory-limit", size_in(MIB, u64::MAX), NewWorkers,
        "Lua heap limit; unset: a third of what limits.address-space leaves free (or the machine's memory), so running out is a Lua error, never an abort."),
    key!(lua.stack_size as "stack-size", size_in(64 * KIB, u64::MAX), NewWorkers,
        "Lua stack limit; unset: the engine's default."),
    // [daemon]
    key!(daemon.socket as "socket", Kind::Path, Restart,
        "The daemon's socket; `--socket` and $CELLVISOR_SOCKET win; unset: daemon.sock in the runtime directory."),
    key!(daemon.idle_exit as "idle-exit", millis(0, Duration::MAX), AtOnce,
        "An auto-started daemon exits after this long with no sessions; 0 = never."),
    key!(daemon.log as "log", Kind::Path, Restart,
        "The auto-started daemon's log file; unset: next to its socket, with the extension `.log`."),
    key!(daemon.max_pending_requests as "max-pending-requests", count_in(1, 1_000_000), NewConnections,
        "Requests one connection may have unanswered; past it the daemon stops reading that connection until answers go out."),
    key!(daemon.stalled_client_timeout as "stalled-client-timeout", millis(100, HOUR), NewConnections,
        "A connection whose client reads none of its answers for this long, while the daemon waits to send them, is dropped (and logged)."),
    key!(daemon.listen as "listen", Kind::Listeners, Restart,
        "Network listeners beside the Unix socket, like [\"tcp://127.0.0.1:7420\"] (see docs/network.md); empty: none. A non-loopback address needs TLS (`tls-cert`, `tls-key`) or `insecure-plaintext`."),
    key!(daemon.tls_cert as "tls-cert", Kind::Path, Restart,
        "The network listeners' certificate chain (PEM); with `tls-key` they speak TLS only."),
    key!(daemon.tls_key as "tls-key", Kind::Path, Restart,
        "The private key (PEM) of `tls-cert`."),
    key!(daemon.client_ca as "client-ca", Kind::Path, Restart,
        "CA certificates (PEM) a client certificate must chain to (mutual TLS); unset: no client certificate is asked for."),
    key!(daemon.token_file as "token-file", Kind::Path, AtOnce,
        "A file holding the bearer token every network request but `/healthz` must carry (required with `listen`); re-read on `config/reload`."),
    key!(daemon.tenants_file as "tenants-file", Kind::Path, AtOnce,
        "A TOML file of `[[tenants]]` (name, token-files, rights, quotas; see docs/network.md#tenants) used instead of `token-file`: each token's requests see only its tenant's sessions; re-read on `config/reload`."),
    key!(daemon.insecure_plaintext as "insecure-plaintext", Kind::Bool, Restart,
        "Allow a listener on a non-loopback address without TLS (tokens then cross the network in the clear)."),
    key!(daemon.node as "node", Kind::Text, Restart,
        "This daemon's name in results, `status` and metrics; unset: the host name."),
    key!(daemon.max_network_connections as "max-network-connections", count_in(1, 1_000_000), Restart,
        "Authenticated network connections (ones that presented the token, idle keep-alives and WebSockets included) held at once; past it a request with the token is answered 503. Connections without the token count under `max-unauthenticated-connections`."),
    key!(daemon.max_unauthenticated_connections as "max-unauthenticated-connections", count_in(1, 1_000_000), Restart,
        "Network connections that have not yet presented the token, at once, apart from `max-network-connections` (which only authenticated ones hold); past it a new connection is closed at once."),
    key!(daemon.max_connections_per_address as "max-connections-per-address", count_in(1, 1_000_000), Restart,
        "Unauthenticated network connections from one IP address at once (an IPv6 address counts by its /64 prefix, which one host is commonly given whole); past it a new one from that address is closed at once."),
    key!(daemon.unauthenticated_timeout as "unauthenticated-timeout", millis(100, HOUR), Restart,
        "How long a new network connection (and its TLS handshake) has to send a request with the token; then it is closed."),
    key!(daemon.max_header_bytes as "max-header-bytes", size_in(8 * 1024, 1024 * 1024), Restart,
        "The most a request's headers may take on the network listeners (at least 8 KiB); a longer head closes the connection."),
    key!(daemon.drain_idle as "drain-idle", millis(0, HOUR), AtOnce,
        "While draining (`cellvisor drain`, SIGUSR1), a session that was busy when the drain began is stopped once it has been idle this long, so an agent's next cell still runs; idle sessions stop at once."),
    key!(daemon.request_memory as "request-memory", count_in(1, 100_000), Restart,
        "How many recent `request_id`s each session remembers with their answers (kept with its snapshots when they are on), so a retried `eval` is answered without running again (docs/protocol.md)."),
    // [startup]
    key!(startup.user as "user", Kind::Bool, NewWorkers,
        "Run `$XDG_CONFIG_HOME/cellvisor/startup/*.{py,js,lua}` (default `~/.config`) in every new worker, after the prelude."),
    key!(startup.project as "project", Kind::Bool, NewWorkers,
        "Run `<cwd>/.cellvisor/startup/*.{py,js,lua}` in every new worker, after the user's; a file here replaces the user's file of the same name."),
    // [sandbox]
    key!(sandbox.enabled as "enabled", Kind::Bool, NewCells,
        "Confine every worker with Landlock after its start-up (see docs/sandbox.md); a request may turn it on, never off."),
    key!(sandbox.required as "required", Kind::Bool, NewCells,
        "true: a kernel that cannot enforce the whole policy refuses the request, naming the missing feature and Landlock ABI; false: workers start with what it can enforce, and a warning in the log and `status`."),
    key!(sandbox.read as "read", Kind::Paths, NewCells,
        "Read-only trees, besides the Python interpreter's prefix and venv; `/etc` is read without its secrets (shadow, sudoers, ssh, ssl/private). Anything else (`~/.ssh`, other sessions' files, the daemon's directory) is out of reach."),
    key!(sandbox.write as "write", Kind::Paths, NewCells,
        "Read-write trees: \"cwd\" (the session's directory) and any paths; the session's own temp directory ($TMPDIR), artifacts and store are always writable."),
    key!(sandbox.network as "network", Kind::Choice(&["none", "loopback", "all"]), NewCells,
        "none: TCP connect and bind fail in cells (Landlock ABI 4); loopback: each worker gets a network namespace of its own with only its loopback (needs user namespaces); all: no network rule."),
    key!(sandbox.network_namespace as "network-namespace", Kind::Bool, NewCells,
        "Also give each worker a network namespace of its own (needs user namespaces): UDP and every other protocol reach nothing outside the worker."),
    key!(sandbox.confine_unix_connect as "confine-unix-connect", Kind::Bool, NewCells,
        "Also confine `connect` on named Unix sockets to the write paths (Landlock ABI 9). The daemon refuses its own workers' descendants on every kernel."),
    key!(sandbox.tmp_max as "tmp-max", size_in(MIB, u64::MAX), NewCells,
        "The most a sandboxed session's temporary directory (`$TMPDIR`, one per language) may hold after a cell; past it the cell ends as an error saying so and the directory's files are removed, so one session cannot keep the runtime file system full for the others."),
    // [snapshots]
    key!(snapshots.when as "when", Kind::Choice(&["never", "on-stop", "every-cell"]), AtOnce,
        "never: a worker's state ends with it; on-stop: its namespace is saved before every planned stop (idle or LRU eviction, memory recycle, reload, daemon stop) and restored on the next cell; every-cell: also after each successful cell, before its answer, which says whether the save was written (`saved`), so a crash loses only the cell that crashed and a cell answered unsaved says so."),
    key!(snapshots.max_size as "max-size", size_in(KIB, 64 * GIB), AtOnce,
        "A namespace bigger than this (per session and language) is not saved; the eviction notice says so."),
    key!(snapshots.timeout as "timeout", millis(100, HOUR), AtOnce,
        "How long writing or reading one snapshot may take; past it the worker stops without it."),
    key!(snapshots.ttl as "ttl", millis(1000, Duration::from_secs(365 * DAY)), AtOnce,
        "A snapshot unused this long is deleted by the sweep (checkpoints too)."),
    key!(snapshots.max_total as "max-total", size_in(MIB, 64 * 1024 * GIB), AtOnce,
        "The snapshot directory's total size; over it the sweep deletes the oldest snapshots first."),
    key!(snapshots.dir as "dir", Kind::Path, Restart,
        "Where snapshots live (mode 0700); default `$XDG_STATE_HOME/cellvisor/snapshots`."),
    key!(snapshots.key_file as "key-file", Kind::Path, Restart,
        "A file of at least 32 bytes, not readable by others, from which every session's snapshot integrity key is derived; a fleet's nodes share it (a Kubernetes Secret) so each verifies what another wrote. Unset: `<dir>/.key`, made by this daemon."),
    key!(snapshots.every_cell_answer as "every-cell-answer", Kind::Choice(&["committed", "async"]), AtOnce,
        "With `when = \"every-cell\"` and `fleet.leases = \"etcd\"`: committed (the default), a cell's answer is sent once its state's pointer is committed in etcd under the lease's fencing token, so every cell answered `complete` is in the state the next node restores, and a refused or failed commit says `saved: false` on that cell; async, once its snapshot is written, the commit still under way (about one etcd round trip less per cell): a node that dies or loses its lease in that window loses the effect of a cell its client was told was `complete`. Without etcd the answer waits for the save either way."),
    // [fleet]
    key!(fleet.leases as "leases", Kind::Switch(&["file", "etcd"]), Restart,
        "Take a lease on each session before running it, so two nodes never run one session (docs/fleet.md): `\"etcd\"` (or `true` / `\"file\"`, a file in `<snapshots.dir>/.leases`, safe only on one host or on machines that never pause: a paused holder does not know it lost its lease). In etcd each lease carries a fencing token, snapshots are immutable blobs behind a pointer committed only under the live token, and a node that cannot prove its lease runs no cell. Leases name the node by `daemon.node`, which must then be stable across restarts (a StatefulSet's pod name)."),
    key!(fleet.lease_ttl as "lease-ttl", millis(1000, HOUR), Restart,
        "How long a lease lasts unless renewed (every third of it while its session lives): how long a dead node's sessions wait before another node may restore them."),
    key!(fleet.agent_listen as "agent-listen", Kind::Listeners, Restart,
        "TCP addresses, like [\"tcp://127.0.0.1:7421\"], answering HAProxy's agent check: `ready` with a weight from the free session slots, or `drain` while draining; empty: none."),
    key!(fleet.etcd_endpoints as "etcd-endpoints", Kind::Urls, Restart,
        "etcd's client URLs, like [\"http://etcd-0:2379\", \"http://etcd-1:2379\"] (`https://` with the TLS keys below); needed by `leases = \"etcd\"`, which refuses to start when no member answers."),
    key!(fleet.etcd_ca_file as "etcd-ca-file", Kind::Path, Restart,
        "The CA certificate (PEM) that signed etcd's server certificates, for `https://` endpoints; unset: the system's roots."),
    key!(fleet.etcd_cert_file as "etcd-cert-file", Kind::Path, Restart,
        "This node's client certificate (PEM) for etcd's client-certificate authentication, with `etcd-key-file`."),
    key!(fleet.etcd_key_file as "etcd-key-file", Kind::Path, Restart,
        "The key (PEM) of `etcd-cert-file`."),
    key!(fleet.etcd_user as "etcd-user", Kind::Text, Restart,
        "etcd's user name, when etcd's authentication is on, with `etcd-password-file`."),
    key!(fleet.etcd_password_file as "etcd-password-file", Kind::Path, Restart,
        "A file (not readable by others) whose first line is `etcd-user`'s password."),
    // [isolation]
    key!(isolation.level as "level", Kind::Choice(&["auto", "uid", "landlock", "none"]), Restart,
        "Who a cell is and what it reaches (docs/hardening.md). uid: every worker of a session runs as a uid and gid leased from `uids` for the session's life, its directories 0700 and its own, the daemon's files and other sessions out of reach (needs root or CAP_SETUID and CAP_SETGID); landlock: workers run as the daemon's user, every session's confined by Landlock away from the daemon's state, runtime and artifact directories, its token, tenants and TLS key files, the snapshot key and other sessions' files, free to read the rest and to write its cwd and its own temporary directory (a kernel without Landlock falls back to none, saying why); none: workers run as the daemon's user; auto: uid where the daemon may change uids and serves clients other than its own user (network listeners in `daemon.listen`, or a `daemon.tenants-file`), otherwise landlock for sessions served on the network (WebSocket, HTTP, MCP over HTTP) and none for local ones (a daemon with only its 0600 Unix socket serves its own user, whose cells run as that user in the caller's directory); where uid cannot be had (an account uses `uids`, another live daemon holds the range, or the daemon's directories are out of other users' reach) auto falls back with a warning and `uid` refuses to start. `status`, `initialize` and the start-up log say which is in force and why."),
    key!(isolation.uids as "uids", Kind::UidRange, Restart,
        "The uids (with gids of the same numbers) leased to sessions, one per live session: a range no account of the machine uses. The default is the gap systemd leaves unused between its greeter and DynamicUser ranges, above login.defs' UID_MAX. At start the daemon reads /etc/passwd and /etc/group: a range holding an account's uid or a group's gid is refused at `uid` and skipped (the account named) at `auto`. A uid is leased again only once every process of its last session is gone; with every uid leased a new session is refused, naming this key."),
    // [workspaces]
    key!(workspaces.root as "root", Kind::Path, Restart,
        "Where sessions' workspaces live, one directory per session (`<root>/local/<session>`, `<root>/tenants/<tenant>/<session>`): the working directory of every session served without a caller directory (network clients, MCP over HTTP, library calls without `cwd`). Default `$XDG_STATE_HOME/cellvisor/workspaces`; in a fleet, the shared volume."),
    key!(workspaces.max_bytes as "max-bytes", size_in(KIB, u64::MAX), AtOnce,
        "The most one workspace may hold; a write through the API past it is refused (code -32008), and a cell that leaves it over ends as an error saying so. Unset: no bound."),
    key!(workspaces.max_files as "max-files", count_in(1, u64::MAX), AtOnce,
        "The most files and directories one workspace may hold, checked as max-bytes is. Unset: no bound."),
];

#[cfg(test)]
mod tests {
    use super::super::AppliesWhen;
    use super::*;
    use crate::schema::Config;
    use bytesize::ByteSize;

    #[test]
    fn getters_and_setters_agree() {
        let defaults = Config::default();
        let mut copy = Config::default();
        copy.sessions.max_sessions = 99;
        copy.limits.max_rss = Some(ByteSize::mib(1));
        for spec in KEYS {
            (spec.set)(&mut copy, (spec.get)(&defaults));
        }
        assert_eq!(copy, defaults);
    }

    #[test]
    fn defaults_are_within_their_ranges() {
        let defaults = Config::default();
        for spec in KEYS {
            let value = (spec.get)(&defaults);
            assert!(
                crate::check::values::in_range(&spec.kind, &value),
                "{} default {value:?} outside {}",
                spec.name(),
                spec.kind.describe()
            );
        }
    }

    /// What reads each key, and so when a change to it applies. A section stands for its
    /// keys not named on their own.
    const READ_BY: &[(AppliesWhen, &[&str])] = &[
        // The Supervisor's ReloadConfig re-arms the sweep and the sampler, refills the pool
        // and resizes the artifact store; each Session's UpdateConfig re-arms its heartbeat
        // and sets its budget, and reads the rest at each use; the daemon re-reads its idle
        // exit.
        (
            AtOnce,
            &[
                "sessions.max-sessions",
                "sessions.idle-timeout",
                "sessions.sweep-interval",
                "sessions.heartbeat-interval",
                "sessions.heartbeat-timeout",
                "sessions.restart-budget",
                "sessions.shutdown-grace",
                "cells.max-uncollected",
                "output.artifact-max-age",
                "output.artifact-max-total",
                "limits.max-rss",
                "python.prewarm",
                "daemon.idle-exit",
                "daemon.token-file",
                "daemon.tenants-file",
                "daemon.drain-idle",
                "snapshots",
                "workspaces",
            ],
        ),
        // Per request: its limits, its sandbox plan, its language switches; when a cell
        // starts: its output caps and its deadline (with the interrupt grace).
        (
            NewCells,
            &[
                "cells",
                "sandbox",
                "sessions.mode",
                "sessions.interrupt-grace",
                "output.max-bytes",
                "output.max-lines",
                "output.max-line-length",
                "python.enabled",
                "js.enabled",
                "lua.enabled",
            ],
        ),
        // The daemon's bounds of one connection, taken when it is accepted.
        (
            NewConnections,
            &[
                "daemon.max-pending-requests",
                "daemon.stalled-client-timeout",
            ],
        ),
        // The worker's spec: rlimits (set between fork and exec), its environment (and what
        // the engines and startup files read from it), its start timeout.
        (
            NewWorkers,
            &[
                "limits",
                "env",
                "startup",
                "js.memory-limit",
                "js.stack-size",
                "lua.memory-limit",
                "lua.stack-size",
                "python.interpreter",
                "python.zygote",
                "python.preload",
                "python.shell",
                "sessions.start-timeout",
            ],
        ),
        // Read when the supervisor and the daemon start.
        (
            Restart,
            &[
                "daemon.socket",
                "daemon.log",
                "daemon.listen",
                "daemon.tls-cert",
                "daemon.tls-key",
                "daemon.client-ca",
                "daemon.insecure-plaintext",
                "daemon.node",
                "daemon.max-network-connections",
                "daemon.max-unauthenticated-connections",
                "daemon.max-connections-per-address",
                "daemon.unauthenticated-timeout",
                "daemon.max-header-bytes",
                "daemon.request-memory",
                "output.artifact-dir",
                "snapshots.dir",
                "snapshots.key-file",
                "sessions.key",
                "fleet",
                "isolation",
                "workspaces.root",
            ],
        ),
    ];

    /// The cases [`READ_BY`] gives `spec`: those naming it, else those naming its section.
    fn read_by(spec: &KeySpec) -> Vec<AppliesWhen> {
        let naming = |name: &str| -> Vec<AppliesWhen> {
            READ_BY
                .iter()
                .filter(|(_, names)| names.contains(&name))
                .map(|(when, _)| *when)
                .collect()
        };
        let own = naming(&spec.name());
        if own.is_empty() {
            naming(spec.section)
        } else {
            own
        }
    }

    #[test]
    fn every_key_applies_when_the_code_reading_it_takes_it() {
        for spec in KEYS {
            assert_eq!(read_by(spec), [spec.applies], "{}", spec.name());
        }
    }

    #[test]
    fn every_case_is_the_apply_time_of_some_key() {
        for when in AppliesWhen::ALL {
            assert!(KEYS.iter().any(|spec| spec.applies == when), "{when:?}");
        }
    }
}
