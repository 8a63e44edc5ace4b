//! The environment a worker sees: an allowlist of the supervisor's variables, minus a
//! denylist of credentials (the denylist wins), plus fixed values.

use cellvisor_config::{Config, EnvConfig};
use cellvisor_ipc::Language;
use std::ffi::OsString;

/// Variables passed through by default. A trailing `*` matches a prefix.
pub const DEFAULT_ALLOW: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TERM",
    "TZ",
    "TMPDIR",
    "TEMP",
    "TMP",
    "XDG_*",
    "SSH_AUTH_SOCK",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "PYTHONPATH",
    "PYENV_*",
    "NODE_PATH",
    "LUA_PATH",
    "LUA_CPATH",
    "RUST_LOG",
];

/// Credentials never passed, even when allowed.
pub const DEFAULT_DENY: &[&str] = &[
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "OPENROUTER_API_KEY",
    "MISTRAL_API_KEY",
    "AZURE_OPENAI_API_KEY",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "HF_TOKEN",
];

fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// Filters `vars` through the allow and deny lists of `config`.
pub fn filter(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
    config: &EnvConfig,
) -> Vec<(OsString, OsString)> {
    let allowed = |name: &str| {
        DEFAULT_ALLOW
            .iter()
            .copied()
            .chain(config.allow.iter().map(String::as_str))
            .any(|p| matches(p, name))
    };
    let denied = |name: &str| {
        DEFAULT_DENY
            .iter()
            .copied()
            .chain(config.deny.iter().map(String::as_str))
            .any(|p| matches(p, name))
    };
    let mut out: Vec<(OsString, OsString)> = vars
        .into_iter()
        .filter(|(k, _)| k.to_str().is_some_and(|k| allowed(k) && !denied(k)))
        .collect();
    for (k, v) in &config.set {
        out.retain(|(name, _)| name.to_str() != Some(k.as_str()));
        out.push((k.into(), v.into()));
    }
    out
}

/// The full environment of a `language` worker under `config`.
pub fn for_worker(config: &Config, language: Language) -> Vec<(OsString, OsString)> {
    let mut env = filter(std::env::vars_os(), &config.env);
    let mut set = |k: &str, v: String| {
        env.retain(|(name, _)| name.to_str() != Some(k));
        env.push((k.into(), v.into()));
    };
    set("PYTHONUNBUFFERED", "1".into());
    set("PYTHONIOENCODING", "utf-8".into());
    let engine = match language {
        Language::JavaScript => Some(&config.js),
        Language::Lua => Some(&config.lua),
        Language::Python => None,
    };
    if let Some(engine) = engine {
        if let Some(limit) = engine.memory_limit {
            set("CELLVISOR_MEMORY_LIMIT", limit.as_u64().to_string());
        }
        if let Some(stack) = engine.stack_size {
            set("CELLVISOR_STACK_SIZE", stack.as_u64().to_string());
        }
    }
    let startup_levels: Vec<&str> = [
        ("user", config.startup.user),
        ("project", config.startup.project),
    ]
    .into_iter()
    .filter_map(|(level, on)| on.then_some(level))
    .collect();
    set(
        cellvisor_workers::startup::LEVELS_VAR,
        startup_levels.join(","),
    );
    if language == Language::Python {
        if let Some(interpreter) = &config.python.interpreter {
            set("CELLVISOR_PYTHON", interpreter.clone());
        }
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn allowlist_then_denylist_then_set() {
        let mut config = EnvConfig::default();
        config.allow.push("MY_*".into());
        config.deny.push("MY_SECRET".into());
        config.set.insert("FIXED".into(), "1".into());
        let out = filter(
            vars(&[
                ("PATH", "/bin"),
                ("LC_ALL", "C"),
                ("OPENAI_API_KEY", "sk-x"),
                ("RANDOM_THING", "x"),
                ("MY_VAR", "ok"),
                ("MY_SECRET", "no"),
            ]),
            &config,
        );
        let names: Vec<_> = out.iter().map(|(k, _)| k.to_str().unwrap()).collect();
        assert_eq!(names, ["PATH", "LC_ALL", "MY_VAR", "FIXED"]);
    }

    #[test]
    fn a_denied_credential_stays_out_even_if_allowed() {
        let config = EnvConfig {
            allow: vec!["OPENAI_API_KEY".into()],
            ..EnvConfig::default()
        };
        assert!(filter(vars(&[("OPENAI_API_KEY", "sk")]), &config).is_empty());
    }
}
