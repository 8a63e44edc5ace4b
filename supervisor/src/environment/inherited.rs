//! What a worker inherits from the supervisor: an allowlist of its variables, minus a
//! denylist of credential patterns (the denylist wins over every allow rule), plus the
//! operator's `[env] set` values.

use cellvisor_config::EnvConfig;
use std::ffi::OsString;

/// Variables passed through by default. A trailing `*` matches a prefix. `SSH_AUTH_SOCK` is
/// not among them: the agent socket signs as the user; pass it with `[env] set` on purpose.
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
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "PYTHONPATH",
    "PYENV_*",
    "NODE_PATH",
    "LUA_PATH",
    "LUA_CPATH",
    "RUST_LOG",
];

/// Credentials never passed, even when allowed: patterns, matched ignoring case, where a `*`
/// at the start or end matches any text.
pub const DEFAULT_DENY: &[&str] = &[
    "*TOKEN*",
    "*SECRET*",
    "*PASSWORD*",
    "*PASSWD*",
    "*_KEY",
    "*_KEY_ID",
    "*CREDENTIAL*",
    "*AUTH*",
    "*_DSN",
    "DATABASE_URL",
];

/// Whether `name` fits `pattern`: exact, or with `*` at the start and/or end of the pattern
/// matching any text there.
fn matches(pattern: &str, name: &str) -> bool {
    let (anywhere_before, rest) = match pattern.strip_prefix('*') {
        Some(rest) => (true, rest),
        None => (false, pattern),
    };
    let (anywhere_after, core) = match rest.strip_suffix('*') {
        Some(core) => (true, core),
        None => (false, rest),
    };
    match (anywhere_before, anywhere_after) {
        (false, false) => name == core,
        (false, true) => name.starts_with(core),
        (true, false) => name.ends_with(core),
        (true, true) => name.contains(core),
    }
}

/// Name endings that say a variable holds a place (an endpoint's address), not a secret:
/// the built-in "contains" patterns (`*TOKEN*`, `*AUTH*`, ...) do not take such a name
/// (`MYAPP_TOKEN_URL`, `OAUTH_ENDPOINT`) unless its value carries a password.
const PLACE_SUFFIXES: &[&str] = &["_URL", "_URI", "_ENDPOINT"];

/// Whether a URL-like `value` carries a password in its user info (`scheme://user:pw@host`).
fn carries_password(value: &str) -> bool {
    value.split_once("://").is_some_and(|(_, rest)| {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        authority
            .rsplit_once('@')
            .is_some_and(|(user_info, _)| user_info.contains(':'))
    })
}

/// Whether `name` (holding `value`) is a credential by the built-in denylist or one of
/// `deny`'s patterns (matched ignoring case). The built-in patterns that match anywhere in a
/// name spare a name ending in a place suffix ([`PLACE_SUFFIXES`]) whose value has no
/// password; the operator's `deny` patterns apply as written.
pub(super) fn denied(name: &str, value: &str, deny: &[String]) -> bool {
    let name = name.to_ascii_uppercase();
    let place = PLACE_SUFFIXES.iter().any(|s| name.ends_with(s)) && !carries_password(value);
    let built_in = DEFAULT_DENY.iter().any(|p| {
        let anywhere = p.starts_with('*') && p.ends_with('*');
        matches(p, &name) && !(anywhere && place)
    });
    built_in || deny.iter().any(|p| matches(&p.to_ascii_uppercase(), &name))
}

/// Filters `vars` through the allow and deny lists of `config`, then adds `config.set` (over
/// a filtered value of the same name).
pub(super) fn filter(
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
    let mut out: Vec<(OsString, OsString)> = vars
        .into_iter()
        .filter(|(k, v)| {
            k.to_str()
                .is_some_and(|k| allowed(k) && !denied(k, &v.to_string_lossy(), &config.deny))
        })
        .collect();
    for (k, v) in &config.set {
        out.retain(|(name, _)| name.to_str() != Some(k.as_str()));
        out.push((k.into(), v.into()));
    }
    out
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

    #[test]
    fn credential_patterns_win_over_allowed_prefixes() {
        let config = EnvConfig {
            allow: vec!["MY_*".into(), "DATABASE_URL".into()],
            ..EnvConfig::default()
        };
        let secrets = [
            ("LC_API_TOKEN", "t"),
            ("XDG_SESSION_TOKEN", "t"),
            ("PYENV_GITHUB_TOKEN", "t"),
            ("SSH_AUTH_SOCK", "/tmp/agent"),
            ("MY_DB_PASSWORD", "p"),
            ("MY_PASSWD", "p"),
            ("MY_SIGNING_KEY", "k"),
            ("MY_ACCESS_KEY_ID", "k"),
            ("MY_CREDENTIALS_FILE", "c"),
            ("MY_SENTRY_DSN", "d"),
            ("MY_client_secret", "s"),
            ("DATABASE_URL", "postgres://u:p@h/db"),
        ];
        let mut all = secrets.to_vec();
        all.extend([("LC_ALL", "C"), ("MY_KEYBOARD", "us"), ("PATH", "/bin")]);
        let out = filter(vars(&all), &config);
        let names: Vec<_> = out.iter().map(|(k, _)| k.to_str().unwrap()).collect();
        assert_eq!(names, ["LC_ALL", "MY_KEYBOARD", "PATH"]);
    }

    #[test]
    fn a_place_named_like_a_credential_passes_unless_it_carries_a_password() {
        let config = EnvConfig {
            allow: vec!["MYAPP_*".into()],
            ..EnvConfig::default()
        };
        let out = filter(
            vars(&[
                ("MYAPP_TOKEN_URL", "https://auth.example/token"),
                ("MYAPP_AUTH_ENDPOINT", "https://auth.example"),
                ("MYAPP_SECRET_URL", "https://u:pw@auth.example/x"),
                ("MYAPP_TOKEN", "t"),
            ]),
            &config,
        );
        let names: Vec<_> = out.iter().map(|(k, _)| k.to_str().unwrap()).collect();
        assert_eq!(names, ["MYAPP_TOKEN_URL", "MYAPP_AUTH_ENDPOINT"]);
        assert!(denied("DATABASE_URL", "postgres://h/db", &[]));
        assert!(denied("MYAPP_TOKEN_URL", "x", &["MYAPP_*".into()]));
        assert!(carries_password("redis://:pw@h:6379"));
        assert!(!carries_password("https://h/a@b"));
    }

    #[test]
    fn patterns_match_at_either_end() {
        assert!(matches("*TOKEN*", "A_TOKEN_B"));
        assert!(matches("*_KEY", "API_KEY"));
        assert!(!matches("*_KEY", "API_KEYS"));
        assert!(matches("LC_*", "LC_ALL"));
        assert!(!matches("LC_*", "XLC_ALL"));
        assert!(matches("PATH", "PATH"));
        assert!(!matches("PATH", "PATHS"));
    }

    #[test]
    fn set_passes_a_value_past_the_denylist_on_purpose() {
        let mut config = EnvConfig::default();
        config
            .set
            .insert("SSH_AUTH_SOCK".into(), "/run/agent".into());
        let out = filter(vars(&[("SSH_AUTH_SOCK", "/tmp/other")]), &config);
        assert_eq!(out, vars(&[("SSH_AUTH_SOCK", "/run/agent")]));
    }
}
