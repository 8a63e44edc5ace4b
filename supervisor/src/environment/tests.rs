use super::*;
use cellvisor_config::Config;

fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
    pairs
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect()
}

fn rendered(env: &WorkerEnv) -> Vec<(String, String)> {
    env.render()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect()
}

fn value<'a>(all: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    all.iter()
        .filter(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .collect()
}

#[test]
fn the_filter_passes_allowed_variables_and_keeps_credentials_out() {
    let mut config = Config::default();
    config.env.allow.push("MY_*".into());
    config.env.set.insert("FIXED".into(), "1".into());
    let env = WorkerEnv::from_vars(
        vars(&[
            ("PATH", "/bin"),
            ("OPENAI_API_KEY", "sk-x"),
            ("MY_VAR", "ok"),
            ("MY_TOKEN", "no"),
            ("RANDOM_THING", "x"),
        ]),
        &config,
        Language::Lua,
    );
    let all = rendered(&env);
    assert_eq!(value(&all, "PATH"), ["/bin"]);
    assert_eq!(value(&all, "MY_VAR"), ["ok"]);
    assert_eq!(value(&all, "FIXED"), ["1"]);
    for kept_out in ["OPENAI_API_KEY", "MY_TOKEN", "RANDOM_THING"] {
        assert!(
            value(&all, kept_out).is_empty(),
            "{kept_out} reached the worker"
        );
        assert_eq!(env.get(kept_out), None);
    }
}

#[test]
fn what_cellvisor_sets_wins_over_inherited_values_and_appears_once() {
    let mut config = Config::default();
    config.env.allow.push(names::PYTHON.into());
    config.env.allow.push(names::SESSION.into());
    config.python.interpreter = Some("/opt/python".into());
    let mut env = WorkerEnv::from_vars(
        vars(&[
            ("VIRTUAL_ENV", "/daemon/venv"),
            ("TMPDIR", "/tmp"),
            (names::PYTHON, "/inherited/python"),
            (names::SESSION, "someone-else"),
            ("PYTHONUNBUFFERED", "0"),
        ]),
        &config,
        Language::Python,
    );
    env.set_virtual_env(Path::new("/caller/venv"));
    env.set_session("mine", Path::new("/state/mine"));
    let all = rendered(&env);
    assert_eq!(value(&all, "VIRTUAL_ENV"), ["/caller/venv"]);
    assert_eq!(value(&all, names::PYTHON), ["/opt/python"]);
    assert_eq!(value(&all, names::SESSION), ["mine"]);
    assert_eq!(value(&all, "PYTHONUNBUFFERED"), ["1"]);
    assert_eq!(
        value(&all, "TMPDIR"),
        ["/tmp"],
        "inherited where cellvisor is silent"
    );
    assert_eq!(env.configured_python(), Some(OsStr::new("/opt/python")));
}

#[test]
fn each_typed_value_round_trips() {
    let mut config = Config::default();
    config.js.memory_limit = Some(bytesize::ByteSize::mib(64));
    config.js.stack_size = Some(bytesize::ByteSize::kib(512));
    config.startup.project = false;
    let mut env = WorkerEnv::from_vars(Vec::new(), &config, Language::JavaScript);
    assert_eq!(env.memory_limit(), Some(64 * 1024 * 1024));
    assert_eq!(env.stack_size(), Some(512 * 1024));
    assert_eq!(
        env.startup(),
        StartupLevels {
            user: config.startup.user,
            project: false
        }
    );
    for levels in [(true, true), (true, false), (false, true), (false, false)] {
        let levels = StartupLevels {
            user: levels.0,
            project: levels.1,
        };
        env.set_startup(levels);
        assert_eq!(env.startup(), levels);
    }
    assert_eq!(env.session(), None);
    assert_eq!(env.store_dir(), None);
    env.set_session("s/1", Path::new("/state/s_1"));
    assert_eq!(env.session().as_deref(), Some("s/1"));
    assert_eq!(env.store_dir(), Some(PathBuf::from("/state/s_1")));
    env.set_artifact_dir(Path::new("/run/artifacts"));
    assert_eq!(env.artifact_dir(), Some(PathBuf::from("/run/artifacts")));
    env.set_taken_record(Path::new("/run/w1.taken"));
    assert_eq!(env.taken_record(), Some(PathBuf::from("/run/w1.taken")));
    env.set_virtual_env(Path::new("/p/.venv"));
    assert_eq!(env.virtual_env(), Some(PathBuf::from("/p/.venv")));
    // Each under the name the worker reads.
    let all = rendered(&env);
    assert_eq!(value(&all, names::STORE_DIR), ["/state/s_1"]);
    assert_eq!(value(&all, names::ARTIFACT_DIR), ["/run/artifacts"]);
    assert_eq!(value(&all, names::TAKEN_RECORD), ["/run/w1.taken"]);
    assert_eq!(value(&all, names::MEMORY_LIMIT), ["67108864"]);
}

#[test]
fn only_javascript_and_lua_get_engine_limits_and_only_python_the_interpreter() {
    let mut config = Config::default();
    config.lua.memory_limit = Some(bytesize::ByteSize::mib(8));
    config.python.interpreter = Some("/opt/python".into());
    let lua = WorkerEnv::from_vars(Vec::new(), &config, Language::Lua);
    assert_eq!(lua.memory_limit(), Some(8 * 1024 * 1024));
    assert_eq!(lua.configured_python(), None);
    let python = WorkerEnv::from_vars(Vec::new(), &config, Language::Python);
    assert_eq!(python.memory_limit(), None);
    assert_eq!(python.configured_python(), Some(OsStr::new("/opt/python")));
}

#[test]
fn the_session_vars_a_first_cell_carries_are_the_sessions_name_and_store() {
    let mut env = WorkerEnv::from_vars(Vec::new(), &Config::default(), Language::Python);
    assert!(env.session_vars().is_empty(), "a prewarmed worker has none");
    env.set_session("s", Path::new("/state/s"));
    assert_eq!(
        env.session_vars(),
        [
            (names::SESSION.to_string(), "s".to_string()),
            (names::STORE_DIR.to_string(), "/state/s".to_string())
        ]
    );
}

#[test]
fn confining_sets_the_rules_and_own_directories_and_unconfining_keeps_the_sessions_tmp() {
    let mut config = Config::default();
    config.env.allow.push("MPLCONFIGDIR".into());
    config.env.allow.push(names::SANDBOX.into());
    let mut env = WorkerEnv::from_vars(
        vars(&[
            ("TMPDIR", "/tmp"),
            ("MPLCONFIGDIR", "/home/u/.mpl"),
            (names::SANDBOX, "{}"),
        ]),
        &config,
        Language::Python,
    );
    env.unconfine(Path::new("/run/artifacts"), Path::new("/run/t/s"));
    assert_eq!(
        env.sandbox_rules(),
        None,
        "an inherited rule set never applies"
    );
    let rules = Rules {
        required: true,
        read: vec!["/usr".into()],
        write: vec!["/run/t/s".into()],
        deny_tcp: true,
        ..Rules::default()
    };
    env.confine(&rules, Path::new("/run/t/s"), Path::new("/run/artifacts/s"))
        .expect("rules serialize");
    assert_eq!(env.sandbox_rules(), Some(rules));
    let all = rendered(&env);
    assert_eq!(value(&all, "TMPDIR"), ["/run/t/s"]);
    assert_eq!(value(&all, "MPLCONFIGDIR"), ["/run/t/s/matplotlib"]);
    assert_eq!(env.artifact_dir(), Some(PathBuf::from("/run/artifacts/s")));

    env.unconfine(Path::new("/run/artifacts"), Path::new("/run/t/s"));
    let all = rendered(&env);
    assert_eq!(env.sandbox_rules(), None);
    assert!(value(&all, names::SANDBOX).is_empty());
    // The inherited temporary directory is no session's: it is never cleaned.
    assert_eq!(value(&all, "TMPDIR"), ["/run/t/s"]);
    assert_eq!(value(&all, "MPLCONFIGDIR"), ["/run/t/s/matplotlib"]);
    assert!(env.has_session_tmp());
    assert_eq!(env.artifact_dir(), Some(PathBuf::from("/run/artifacts")));
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_callers_environment_is_filtered_as_the_supervisors_own() {
    let mut config = Config::default();
    config.env.allow.push("MYAPP_*".into());
    config.env.set.insert("FIXED".into(), "1".into());
    let caller = map(&[
        ("MYAPP_MODE", "dev"),
        ("MYAPP_TOKEN", "secret"),
        ("AWS_SECRET_ACCESS_KEY", "k"),
        ("LC_ALL", "C"),
        ("UNRELATED", "x"),
        ("FIXED", "caller's"),
    ]);
    assert_eq!(
        caller_vars(&caller, &config.env),
        map(&[("FIXED", "1"), ("LC_ALL", "C"), ("MYAPP_MODE", "dev")])
    );
}

#[test]
fn caller_changes_are_the_difference_and_never_touch_cellvisors_own_names() {
    let config = Config::default();
    let mut env = WorkerEnv::from_vars(
        vars(&[("PATH", "/bin"), ("LANG", "C"), ("VIRTUAL_ENV", "/v")]),
        &config,
        Language::Python,
    );
    env.set_session("s", Path::new("/store"));
    let caller = map(&[
        ("PATH", "/usr/bin"),
        ("LC_ALL", "C.UTF-8"),
        ("CELLVISOR_SESSION", "other"),
        ("PYTHONUNBUFFERED", "0"),
    ]);
    // Against what the worker inherited: PATH changes, LC_ALL comes, LANG (which the caller
    // lacks) goes; VIRTUAL_ENV (which chose the interpreter) stays, and cellvisor's own
    // names are not the caller's to set.
    assert_eq!(
        env.caller_changes(&caller, None),
        vec![
            ("LANG".to_string(), None),
            ("LC_ALL".to_string(), Some("C.UTF-8".to_string())),
            ("PATH".to_string(), Some("/usr/bin".to_string())),
        ]
    );
    // Against the last caller's: only what changed.
    let next = map(&[("PATH", "/usr/bin"), ("TZ", "UTC")]);
    assert_eq!(
        env.caller_changes(&next, Some(&caller)),
        vec![
            ("LC_ALL".to_string(), None),
            ("TZ".to_string(), Some("UTC".to_string())),
        ]
    );
    assert!(env.caller_changes(&next, Some(&next)).is_empty());
}
