//! Validation, overrides and `config show`, end to end through the library API.

use crate::keys::{self, KEYS};
use crate::{parse_str, Config, ConfigError, Effective, KeyError, Origin};
use bytesize::ByteSize;
use std::path::Path;
use std::time::Duration;

const PATH: &str = "/etc/cellvisor/config.toml";

fn env(vars: &[(&str, &str)]) -> Vec<(String, String)> {
    vars.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn ok(text: &str, vars: &[(&str, &str)]) -> Effective {
    parse_str(text, Path::new(PATH), env(vars)).unwrap_or_else(|e| panic!("{e}"))
}

fn errors(text: &str, vars: &[(&str, &str)]) -> Vec<KeyError> {
    match parse_str(text, Path::new(PATH), env(vars)) {
        Err(ConfigError::Invalid { errors, .. }) => errors,
        Err(other) => panic!("unexpected error {other}"),
        Ok(effective) => panic!("accepted: {:?}", effective.config),
    }
}

/// The one error of `text`, displayed.
fn error(text: &str) -> String {
    let errors = errors(text, &[]);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    errors[0].to_string()
}

fn line_of(error: &KeyError) -> usize {
    match error.origin {
        Origin::File { line, .. } => line,
        _ => 0,
    }
}

#[test]
fn every_mistake_in_a_file_is_reported_with_its_line() {
    let text = r#"[sessions]
max-sesions = 2
max-sessions = "four"
heartbeat-interval = 5
idle-timeout = "5 parsecs"

[output]
max-bytes = 100
max-lines = 5

[limit]
processes = 2

[env]
deny = ["AWS_*", "BAD-NAME"]
set = { GOOD = "1", "not ok" = "2", ALSO = 3 }
"#;
    let errors = errors(text, &[]);
    let shown: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let lines: Vec<usize> = errors.iter().map(line_of).collect();
    assert_eq!(lines, [2, 3, 4, 5, 8, 9, 11, 15, 16, 16], "{shown:#?}");
    let expect = [
        "/etc/cellvisor/config.toml:2:1: sessions.max-sesions: unknown key; did you mean `max-sessions`?",
        "/etc/cellvisor/config.toml:3:16: sessions.max-sessions: expected an integer from 1 to 10000, found \"four\"",
        "/etc/cellvisor/config.toml:4:22: sessions.heartbeat-interval: a duration needs a unit: write \"5s\" or \"5ms\" (a duration from 10ms to 1h)",
        "/etc/cellvisor/config.toml:5:16: sessions.idle-timeout: cannot read \"5 parsecs\" as a duration",
        "/etc/cellvisor/config.toml:8:13: output.max-bytes: a size needs a unit",
        "/etc/cellvisor/config.toml:9:13: output.max-lines: 5 is out of range: expected an integer from 10 to 10000000",
        "/etc/cellvisor/config.toml:11:2: limit: unknown section; did you mean `[limits]`?",
        "/etc/cellvisor/config.toml:15:8: env.deny: not a variable name: \"BAD-NAME\"",
        "/etc/cellvisor/config.toml:16:21: env.set.not ok: not a valid variable name",
        "/etc/cellvisor/config.toml:16:44: env.set.ALSO: expected a string, found the integer 3",
    ];
    for (shown, expect) in shown.iter().zip(expect) {
        assert!(
            shown.starts_with(expect),
            "{shown}\n  does not start with\n{expect}"
        );
    }
    // The error displays all of them, one per line.
    let err = parse_str(text, Path::new(PATH), env(&[])).unwrap_err();
    assert_eq!(err.to_string().lines().count(), 10, "{err}");
}

#[test]
fn misplaced_and_misspelt_keys_get_suggestions() {
    assert!(error("[sessions]\ndefault-timeout = \"5s\"\n")
        .ends_with("did you mean `default-timeout` in [cells]?"));
    assert!(error("[sessions]\nmax_sessions = 2\n").ends_with("did you mean `max-sessions`?"));
    assert!(error("[sesions]\n").ends_with("did you mean `[sessions]`?"));
    let far = error("[cells]\nbananas = 1\n");
    assert!(
        far.contains("keys of [cells] are `default-timeout`, `min-timeout`, `max-timeout`"),
        "{far}"
    );
    assert!(error("[nothing-like-it]\n").contains("sections are `sessions`"));
}

#[test]
fn wrong_shapes_are_reported() {
    assert!(error("sessions = 3\n").contains("expected a table `[sessions]`, found the integer 3"));
    assert!(error("[[cells]]\n").contains("found an array of tables"));
    assert!(error("[limits]\nprocesses = 1.5\n").contains("found the number 1.5"));
    assert!(error("[limits]\nprocesses = \"64\"\n").contains("without quotes: 64"));
    assert!(error("[limits]\nprocesses = -1\n").contains("found -1"));
    assert!(error("[python]\ninterpreter = \"\"\n").contains("expected a non-empty string"));
    assert!(error("[env]\nallow = \"HOME\"\n").contains("expected a list of variable names"));
    assert!(error("[env]\nallow = [\"*\"]\n").contains("not a variable name: \"*\""));
    assert!(
        error("[limits]\naddress-space = \"lots\"\n").contains("cannot read \"lots\" as a size")
    );
    assert!(error("[limits]\nmax-rss = \"512\"\n").contains("needs a unit: write \"512MiB\""));
}

#[test]
fn tables_may_be_written_any_way_toml_allows() {
    let effective = ok(
        "sessions.max-sessions = 3\ncells = { max-timeout = \"1h\" }\n\
         [env.set]\nFOO = \"bar\"\n",
        &[],
    );
    assert_eq!(effective.config.sessions.max_sessions, 3);
    assert_eq!(
        effective.config.cells.max_timeout,
        Duration::from_secs(3600)
    );
    assert_eq!(
        effective.config.env.set.get("FOO").map(String::as_str),
        Some("bar")
    );
    assert_eq!(
        effective.origin("env", "set"),
        Some(&Origin::File {
            path: PATH.into(),
            line: 3,
            column: 6
        })
    );
    let shown = error("[env.set]\nFOO = 1\n");
    assert!(
        shown.starts_with(&format!("{PATH}:2:7: env.set.FOO: expected a string")),
        "{shown}"
    );
}

#[test]
fn syntax_errors_carry_line_and_column() {
    let shown = error("[sessions]\nmax-sessions = 2\nidle-timeout = \n");
    assert!(
        shown.starts_with("/etc/cellvisor/config.toml:3:16: TOML syntax error:"),
        "{shown}"
    );
    let duplicate = error("[sessions]\nmax-sessions = 2\nmax-sessions = 3\n");
    assert!(duplicate.contains(":3:"), "{duplicate}");
}

#[test]
fn ranges_come_from_the_key_table() {
    let cases = [
        (
            "[sessions]\nmax-sessions = 0",
            "expected an integer from 1 to 10000",
        ),
        (
            "[sessions]\nmax-sessions = 10001",
            "expected an integer from 1 to 10000",
        ),
        (
            "[sessions]\nidle-timeout = \"31d\"",
            "up to 30days (0 = never)",
        ),
        ("[sessions]\nsweep-interval = \"1ms\"", "from 10ms to 1h"),
        ("[sessions]\nstart-timeout = \"11m\"", "from 100ms to 10m"),
        ("[sessions]\nrestart-budget = 101", "from 0 to 100"),
        ("[cells]\nmax-timeout = \"2days\"", "from 100ms to 1day"),
        ("[output]\nmax-bytes = \"2GiB\"", "from 1KiB to 1GiB"),
        ("[limits]\naddress-space = \"63MiB\"", "at least 64MiB"),
        ("[limits]\ncpu-time = \"500ms\"", "at least 1s"),
        ("[limits]\nopen-files = 8", "from 16 to 1048576"),
        ("[limits]\nprocesses = 0", "from 1 to 1048576"),
        ("[limits]\nfile-size = \"1000B\"", "at least 1KiB"),
        ("[limits]\nmax-rss = \"1MiB\"", "at least 16MiB"),
        ("[python]\nprewarm = 17", "from 0 to 16"),
        ("[js]\nmemory-limit = \"512KiB\"", "at least 1MiB"),
        ("[lua]\nstack-size = \"32KiB\"", "at least 64KiB"),
        ("[sessions]\nheartbeat-interval = 0", "from 10ms to 1h"),
    ];
    for (text, expect) in cases {
        let shown = error(text);
        assert!(shown.contains(expect), "{text}: {shown}");
    }
    // The edges are allowed, and 0 means never where it may.
    let effective = ok(
        "[sessions]\nmax-sessions = 10000\nidle-timeout = 0\nrestart-budget = 0\n\
         [daemon]\nidle-exit = \"0s\"\n[limits]\naddress-space = \"64MiB\"\nopen-files = 1048576\n",
        &[],
    );
    assert_eq!(effective.config.sessions.max_sessions, 10_000);
    assert_eq!(effective.config.sessions.idle_timeout, Duration::ZERO);
    assert_eq!(effective.config.daemon.idle_exit, Duration::ZERO);
    assert_eq!(
        effective.config.limits.address_space,
        Some(ByteSize::mib(64))
    );
}

#[test]
fn cross_key_rules_blame_the_key_that_was_set() {
    let shown = error("[sessions]\nheartbeat-timeout = \"5s\"\n");
    assert!(
        shown.starts_with(
            "/etc/cellvisor/config.toml:2:1: sessions.heartbeat-timeout: \
             sessions.heartbeat-timeout (5s) must be longer than sessions.heartbeat-interval (5s)"
        ),
        "{shown}"
    );
    let shown = error("\n[sessions]\nheartbeat-interval = \"1m\"\n");
    assert!(
        shown.starts_with("/etc/cellvisor/config.toml:3:1: sessions.heartbeat-interval:"),
        "{shown}"
    );
    let shown = error("[cells]\nmin-timeout = \"1m\"\n");
    assert!(
        shown.contains("cells.default-timeout (30s) must be at least cells.min-timeout (1m)"),
        "{shown}"
    );
    let shown = error("[cells]\ndefault-timeout = \"1h\"\n");
    assert!(
        shown.contains("must be at most cells.max-timeout (10m)"),
        "{shown}"
    );
    // Equal bounds are fine; a bad value is not blamed twice.
    ok(
        "[cells]\nmin-timeout = \"5s\"\ndefault-timeout = \"5s\"\nmax-timeout = \"5s\"\n",
        &[],
    );
    assert_eq!(
        errors("[sessions]\nheartbeat-timeout = \"nope\"\n", &[]).len(),
        1
    );
}

#[test]
fn env_overrides_win_over_the_file_and_say_so() {
    let effective = ok(
        "[sessions]\nmax-sessions = 2\n[limits]\nmax-rss = \"1GiB\"\n",
        &[
            ("CELLVISOR_SESSIONS__MAX_SESSIONS", "8"),
            ("CELLVISOR_SESSIONS__IDLE_TIMEOUT", "10s"),
            ("CELLVISOR_LIMITS__MAX_RSS", ""),
            ("CELLVISOR_ENV__DENY", "AWS_*, STRIPE_KEY"),
            ("CELLVISOR_OUTPUT__MAX_BYTES", "2 MiB"),
            ("CELLVISOR_CONFIG", "/not/an/override"),
            ("CELLVISOR_SOCKET", "/tmp/x"),
            ("OTHER__THING", "1"),
        ],
    );
    let config = &effective.config;
    assert_eq!(config.sessions.max_sessions, 8);
    assert_eq!(config.sessions.idle_timeout, Duration::from_secs(10));
    assert_eq!(config.limits.max_rss, None);
    assert_eq!(config.env.deny, ["AWS_*", "STRIPE_KEY"]);
    assert_eq!(config.output.max_bytes, ByteSize::mib(2));
    assert_eq!(
        effective.origin("sessions", "max-sessions"),
        Some(&Origin::Env {
            var: "CELLVISOR_SESSIONS__MAX_SESSIONS".into()
        })
    );
    assert_eq!(
        effective.origin("cells", "max-timeout"),
        Some(&Origin::Default)
    );
}

#[test]
fn bad_overrides_name_the_variable() {
    let errors = errors(
        "",
        &[
            ("CELLVISOR_SESSIONS__MAX_SESSIONS", "four"),
            ("CELLVISOR_SESSIONS__MAX_SESIONS", "4"),
            ("CELLVISOR_SESSIONS__HEARTBEAT_INTERVAL", "5"),
            ("CELLVISOR_LIMITS__PROCESSES", "0"),
            ("CELLVISOR_ENV__SET", "A=1"),
            ("CELLVISOR_NOPE__NOTHING_LIKE_IT", "1"),
        ],
    );
    let shown: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let expect = [
        "CELLVISOR_ENV__SET: env.set: cannot be set from the environment",
        "CELLVISOR_LIMITS__PROCESSES: limits.processes: 0 is out of range",
        "CELLVISOR_NOPE__NOTHING_LIKE_IT: unknown override variable; overrides are named",
        "CELLVISOR_SESSIONS__HEARTBEAT_INTERVAL: sessions.heartbeat-interval: a duration needs a unit",
        "CELLVISOR_SESSIONS__MAX_SESIONS: unknown override variable; did you mean `CELLVISOR_SESSIONS__MAX_SESSIONS`?",
        "CELLVISOR_SESSIONS__MAX_SESSIONS: sessions.max-sessions: expected an integer from 1 to 10000, found \"four\"",
    ];
    assert_eq!(shown.len(), expect.len(), "{shown:#?}");
    for (shown, expect) in shown.iter().zip(expect) {
        assert!(
            shown.starts_with(expect),
            "{shown}\n  does not start with\n{expect}"
        );
    }
}

#[test]
fn overrides_take_part_in_cross_key_rules() {
    let errors = errors(
        "[sessions]\nheartbeat-interval = \"2s\"\n",
        &[("CELLVISOR_SESSIONS__HEARTBEAT_TIMEOUT", "1s")],
    );
    assert_eq!(errors.len(), 1);
    assert_eq!(
        errors[0].origin,
        Origin::Env {
            var: "CELLVISOR_SESSIONS__HEARTBEAT_TIMEOUT".into()
        }
    );
}

#[test]
fn show_lists_every_key_with_its_origin_and_parses_back() {
    let text = "# tight box\n[sessions]\nmax-sessions = 2\nidle-timeout = \"1h 30m\"\n\n\
                [limits]\naddress-space = \"1536MiB\"\nprocesses = 64\n\
                [env]\nallow = [\"MY_*\"]\nset = { A = \"x \\\"quoted\\\"\", B = \"\" }\n\
                [python]\ninterpreter = \"/opt/py/bin/python3\"\n\
                [daemon]\nlog = \"/var/log/cellvisor.log\"\n";
    let effective = ok(text, &[("CELLVISOR_OUTPUT__MAX_BYTES", "100000B")]);
    let shown = effective.show();
    for spec in KEYS {
        let line = shown
            .lines()
            .skip_while(|line| *line != format!("[{}]", spec.section))
            .find(|line| {
                line.starts_with(&format!("{} = ", spec.key))
                    || line.starts_with(&format!("# {} = (unset)", spec.key))
            });
        let Some(line) = line else {
            panic!("{} missing from\n{shown}", spec.name());
        };
        let applies = format!("; applies {}", spec.applies.label());
        assert!(line.ends_with(&applies), "{}: {line}", spec.name());
    }
    assert!(
        shown.contains(&format!(
            "max-sessions = 2  # file {PATH}:3; applies at once\n"
        )),
        "{shown}"
    );
    assert!(
        shown.contains("idle-timeout = \"1h 30m\"  # file"),
        "{shown}"
    );
    assert!(
        shown.contains(
            "max-bytes = \"100000B\"  # env CELLVISOR_OUTPUT__MAX_BYTES; applies to new cells\n"
        ),
        "{shown}"
    );
    assert!(
        shown.contains("max-lines = 3000  # default; applies to new cells\n"),
        "{shown}"
    );
    assert!(
        shown.contains("# max-rss = (unset)  # default; applies at once\n"),
        "{shown}"
    );
    assert!(
        shown.contains("address-space = \"1536MiB\"  # file"),
        "{shown}"
    );

    let again = ok(&shown, &[]);
    assert_eq!(again.config, effective.config, "{shown}");
    // And the defaults alone round-trip too.
    let defaults = ok("", &[]);
    assert_eq!(defaults.config, Config::default());
    assert_eq!(ok(&defaults.show(), &[]).config, Config::default());
}

#[test]
fn every_value_round_trips_through_show() {
    // Awkward but valid values of every kind.
    let effective = ok(
        "[sessions]\nheartbeat-interval = \"1500ms\"\nheartbeat-timeout = \"1h\"\n\
         [limits]\nfile-size = \"1025B\"\ncpu-time = \"90s\"\n\
         [output]\nartifact-dir = \"/tmp/with \\\"quote\\\" and \\\\ slash\"\n",
        &[],
    );
    assert_eq!(ok(&effective.show(), &[]).config, effective.config);
}

/// `docs/config.md` holds the generated key table; regenerate with
/// `UPDATE_DOCS=1 cargo test -p cellvisor-config docs_`.
#[test]
fn docs_list_every_key_with_its_range() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/config.md");
    let docs = std::fs::read_to_string(&path).unwrap_or_default();
    let (start, end) = ("<!-- keys:start -->\n", "<!-- keys:end -->");
    let table = crate::show::markdown_table();
    let (Some(a), Some(b)) = (docs.find(start), docs.find(end)) else {
        panic!("{} lacks the {start} / {end} markers", path.display());
    };
    let mut docs = docs.clone();
    if docs[a + start.len()..b] != table {
        if std::env::var_os("UPDATE_DOCS").is_some() {
            docs = format!("{}{table}{}", &docs[..a + start.len()], &docs[b..]);
            std::fs::write(&path, &docs).unwrap_or_else(|e| panic!("{e}"));
        } else {
            panic!(
                "docs/config.md's key table is stale; run UPDATE_DOCS=1 cargo test -p cellvisor-config docs_"
            );
        }
    }
    for spec in KEYS {
        assert!(
            docs.contains(&format!("| `{}` |", spec.key)),
            "{}",
            spec.name()
        );
    }
}

#[test]
fn switches_and_choices_take_their_words_from_the_file_and_the_environment() {
    let effective = ok(
        "[sessions]\nmode = \"per-call\"\n[js]\nenabled = false\n[startup]\nuser = false\n",
        &[("CELLVISOR_LUA__ENABLED", "false")],
    );
    let config = &effective.config;
    assert_eq!(config.sessions.mode, crate::SessionMode::PerCall);
    assert!(!config.js.enabled && !config.lua.enabled && config.python.enabled);
    assert!(!config.startup.user && config.startup.project);
    assert_eq!(config.output.max_line_length, 4000);

    let bad_switch = error("[python]\nenabled = \"no\"\n");
    assert!(bad_switch.contains("python.enabled"), "{bad_switch}");
    assert!(
        bad_switch.contains("expected true or false"),
        "{bad_switch}"
    );
    let bad_choice = error("[sessions]\nmode = \"sometimes\"\n");
    assert!(
        bad_choice.contains("expected one of \"session\", \"per-call\""),
        "{bad_choice}"
    );
    let bad_override = errors("", &[("CELLVISOR_SESSIONS__MODE", "always")]);
    assert_eq!(bad_override.len(), 1, "{bad_override:#?}");
    assert!(
        bad_override[0]
            .to_string()
            .contains("one of \"session\", \"per-call\""),
        "{}",
        bad_override[0]
    );
}

#[test]
fn the_sandbox_section_takes_path_lists_from_the_file_and_the_environment() {
    let effective = ok(
        "[sandbox]\nenabled = true\nwrite = [\"cwd\", \"/data\", \"~/out\"]\nnetwork = \"loopback\"\n",
        &[("CELLVISOR_SANDBOX__READ", "/usr:/opt/tools")],
    );
    let sandbox = &effective.config.sandbox;
    assert!(sandbox.enabled && !sandbox.required);
    assert_eq!(sandbox.write, ["cwd", "/data", "~/out"]);
    assert_eq!(sandbox.read, ["/usr", "/opt/tools"]);
    assert_eq!(sandbox.network, crate::SandboxNetwork::Loopback);
    assert_eq!(
        Config::default().sandbox.read,
        crate::DEFAULT_SANDBOX_READ.to_vec()
    );

    let bad_path = error("[sandbox]\nwrite = [\"relative/dir\", \"/ok\"]\n");
    assert!(bad_path.contains("sandbox.write"), "{bad_path}");
    assert!(
        bad_path.contains("not an allowed path: \"relative/dir\""),
        "{bad_path}"
    );
    let bad_override = errors("", &[("CELLVISOR_SANDBOX__READ", "/usr:etc")]);
    assert_eq!(bad_override.len(), 1, "{bad_override:#?}");
    assert!(
        bad_override[0]
            .to_string()
            .contains("not an allowed path: etc"),
        "{}",
        bad_override[0]
    );
    let bad_network = error("[sandbox]\nnetwork = \"some\"\n");
    assert!(
        bad_network.contains("one of \"none\", \"loopback\", \"all\""),
        "{bad_network}"
    );
}

#[test]
fn reload_changes_are_listed_key_by_key_in_table_order() {
    let old = Config::default();
    let mut new = Config::default();
    new.sessions.max_sessions = old.sessions.max_sessions + 4;
    new.python.prewarm = old.python.prewarm + 1;
    new.limits.max_rss = Some(bytesize::ByteSize::mib(64));
    new.daemon.idle_exit = std::time::Duration::from_secs(90);
    assert_eq!(
        crate::changes(&old, &new),
        [
            format!(
                "sessions.max-sessions: {} -> {}",
                old.sessions.max_sessions, new.sessions.max_sessions
            ),
            "limits.max-rss: unset -> \"64MiB\"".to_string(),
            format!(
                "python.prewarm: {} -> {}",
                old.python.prewarm, new.python.prewarm
            ),
            format!(
                "daemon.idle-exit: \"{}\" -> \"1m 30s\"",
                keys::format_duration(old.daemon.idle_exit)
            ),
        ]
    );
    assert!(crate::changes(&old, &old).is_empty());
}

#[test]
fn the_session_key_is_session_by_default_and_takes_session_plus_cwd_only_by_name() {
    assert_eq!(
        ok("", &[]).config.sessions.key,
        crate::SessionKeyBy::Session
    );
    let pair = ok("[sessions]\nkey = \"session+cwd\"\n", &[]);
    assert_eq!(pair.config.sessions.key, crate::SessionKeyBy::SessionCwd);
    let from_env = ok("", &[("CELLVISOR_SESSIONS__KEY", "session+cwd")]);
    assert_eq!(
        from_env.config.sessions.key,
        crate::SessionKeyBy::SessionCwd
    );
    for bad in ["cwd", "session+dir", "Session"] {
        let message = error(&format!("[sessions]\nkey = \"{bad}\"\n"));
        assert!(message.contains("sessions.key"), "{message}");
        assert!(
            message.contains("expected one of \"session\", \"session+cwd\""),
            "{message}"
        );
    }
}

#[test]
fn isolation_takes_a_level_and_a_uid_range() {
    use crate::schema::{IsolationLevel, UidRange};
    let config = ok(
        "[isolation]\nlevel = \"uid\"\nuids = \"61000-61999\"\n",
        &[],
    )
    .config;
    assert_eq!(config.isolation.level, IsolationLevel::Uid);
    assert_eq!(
        config.isolation.uids,
        UidRange {
            first: 61000,
            last: 61999
        }
    );
    let from_env = ok("", &[("CELLVISOR_ISOLATION__UIDS", "5000-5009")]).config;
    assert_eq!(from_env.isolation.uids.len(), 10);
    assert_eq!(Config::default().isolation.level, IsolationLevel::Auto);
    assert_eq!(Config::default().isolation.uids, UidRange::DEFAULT);
    assert_eq!(UidRange::DEFAULT.to_string(), "60706-61183");
    // The level alone is enough: the range has a default.
    assert_eq!(
        ok("[isolation]\nlevel = \"uid\"\n", &[])
            .config
            .isolation
            .uids,
        UidRange::DEFAULT
    );
    let landlock = ok("[isolation]\nlevel = \"landlock\"\n", &[]).config;
    assert_eq!(landlock.isolation.level, IsolationLevel::Landlock);
}

#[test]
fn a_bad_uid_range_or_uid_without_one_says_what_is_allowed() {
    for bad in ["100-200", "61999-61000", "61000", "a-b", "61000-70000"] {
        let message = error(&format!("[isolation]\nuids = \"{bad}\"\n"));
        assert!(message.contains("isolation.uids"), "{bad}: {message}");
        assert!(message.contains("61000-61999"), "{bad}: {message}");
        assert!(
            message.contains("1000 <= FIRST <= LAST <= 65533"),
            "{bad}: {message}"
        );
    }
    let message = error("[isolation]\nlevel = \"namespace\"\n");
    assert!(
        message.contains("\"auto\", \"uid\", \"landlock\", \"none\""),
        "{message}"
    );
}

#[test]
fn fleet_leases_take_a_switch_or_a_store_and_etcd_needs_endpoints() {
    use crate::schema::LeaseStore;
    let leases = |text: &str| ok(text, &[]).config.fleet.leases;
    assert_eq!(leases(""), LeaseStore::Off);
    assert_eq!(leases("[fleet]\nleases = false\n"), LeaseStore::Off);
    assert_eq!(leases("[fleet]\nleases = true\n"), LeaseStore::File);
    assert_eq!(leases("[fleet]\nleases = \"file\"\n"), LeaseStore::File);
    let etcd = ok(
        "[fleet]\nleases = \"etcd\"\netcd-endpoints = [\"http://127.0.0.1:2379\", \"https://etcd-1:2379\"]\n",
        &[],
    );
    assert_eq!(etcd.config.fleet.leases, LeaseStore::Etcd);
    assert_eq!(etcd.config.fleet.etcd_endpoints.len(), 2);
    let env_etcd = ok(
        "",
        &[
            ("CELLVISOR_FLEET__LEASES", "etcd"),
            (
                "CELLVISOR_FLEET__ETCD_ENDPOINTS",
                "http://a:2379,http://b:2379",
            ),
        ],
    );
    assert_eq!(env_etcd.config.fleet.leases, LeaseStore::Etcd);
    assert_eq!(
        env_etcd.config.fleet.etcd_endpoints,
        ["http://a:2379", "http://b:2379"]
    );

    let wrong = error("[fleet]\nleases = \"zookeeper\"\n");
    assert!(
        wrong.contains("true, false, or one of \"file\", \"etcd\""),
        "{wrong}"
    );
    let no_endpoints = error("[fleet]\nleases = \"etcd\"\n");
    assert!(
        no_endpoints.contains("needs fleet.etcd-endpoints"),
        "{no_endpoints}"
    );
    let bad_url = error("[fleet]\nleases = \"etcd\"\netcd-endpoints = [\"etcd-0:2379\"]\n");
    assert!(bad_url.contains("not a URL: \"etcd-0:2379\""), "{bad_url}");
}
