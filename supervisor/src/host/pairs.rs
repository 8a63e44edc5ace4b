//! `sessions.key = "session+cwd"`: a session's state keyed by the pair (session name,
//! canonical cwd), so a host gives each project its own state under one session name.
//!
//! A pair runs under an internal key, `<name>@<hash>`, the hash being the first 16 hex digits
//! of the SHA-256 of the canonical directory. `@` is a character no session name may hold, so
//! a pair never shares a key (its workers, snapshots, store, lease) with a plain session name,
//! and two directories never share one. `status` and the docs show the real name and cwd.
//!
//! Methods other than `eval` name a pair by `session` and an optional `cwd`: with it, exactly
//! that pair; without it, every pair of the name (`interrupt`, `reset`, `close`) or the only
//! one (the others), refused with the list of cwds when there are several.

use super::{lock, Cellvisor, RequestError};
use crate::names::{split_pair, SessionName};
use crate::session::SessionStatus;
use crate::supervisor::LiveSessionNames;
use cellvisor_config::SessionKeyBy;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Pairs remembered for `status` and for naming a pair without `cwd`, at most.
const MAX_PAIRS: usize = 4096;

/// The internal key of the pair (`name`, `canonical_cwd`): `name@<16 hex of SHA-256(cwd)>`.
pub(crate) fn pair_key(name: &SessionName, canonical_cwd: &Path) -> SessionName {
    SessionName::pair(name, canonical_cwd)
}

/// The directory that keys a pair: `cwd` with `..` and symbolic links resolved, so two
/// spellings of one directory name one pair. Not an existing directory: refused.
pub(crate) fn canonical_cwd(cwd: &Path) -> Result<PathBuf, RequestError> {
    match std::fs::canonicalize(cwd) {
        Ok(canonical) if canonical.is_dir() => Ok(canonical),
        _ => Err(RequestError::Cwd(cwd.to_path_buf())),
    }
}

/// A session as a method names it: its name, and under `session+cwd` the directory of the
/// pair (`None`: every pair of the name, or the only one). Under `session` the cwd is
/// ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionRef<'a> {
    /// The session name.
    pub name: &'a str,
    /// The pair's directory under `sessions.key = "session+cwd"`.
    pub cwd: Option<&'a Path>,
}

impl<'a> SessionRef<'a> {
    /// The session `name` in `cwd`.
    pub fn new(name: &'a str, cwd: Option<&'a Path>) -> SessionRef<'a> {
        SessionRef { name, cwd }
    }
}

impl<'a> From<&'a str> for SessionRef<'a> {
    fn from(name: &'a str) -> SessionRef<'a> {
        SessionRef { name, cwd: None }
    }
}

impl<'a> From<&'a String> for SessionRef<'a> {
    fn from(name: &'a String) -> SessionRef<'a> {
        SessionRef {
            name: name.as_str(),
            cwd: None,
        }
    }
}

/// The pairs this supervisor has run: key -> (name, cwd), for `status` rows and for naming
/// a pair without `cwd`. Bounded: the oldest goes first.
#[derive(Debug, Default)]
pub(super) struct Pairs {
    known: HashMap<String, (String, PathBuf, u64)>,
    next: u64,
}

impl Pairs {
    /// Remembers that `key` is `name` in `cwd`.
    pub(super) fn remember(&mut self, key: &str, name: &str, cwd: &Path) {
        self.next += 1;
        let seq = self.next;
        if let Some(entry) = self.known.get_mut(key) {
            entry.2 = seq;
            return;
        }
        while self.known.len() >= MAX_PAIRS {
            let Some(oldest) = self
                .known
                .iter()
                .min_by_key(|(_, entry)| entry.2)
                .map(|(key, _)| key.clone())
            else {
                break;
            };
            self.known.remove(&oldest);
        }
        self.known
            .insert(key.to_string(), (name.to_string(), cwd.to_path_buf(), seq));
    }

    /// Forgets `key` (its session was closed in every language).
    pub(super) fn forget(&mut self, key: &str) {
        self.known.remove(key);
    }

    /// The directory of `key`, when it is a known pair.
    pub(super) fn cwd(&self, key: &str) -> Option<&Path> {
        self.known.get(key).map(|entry| entry.1.as_path())
    }

    /// The known pairs of `name`, as (key, cwd), sorted by cwd.
    pub(super) fn of(&self, name: &str) -> Vec<(String, PathBuf)> {
        let mut found: Vec<(String, PathBuf)> = self
            .known
            .iter()
            .filter(|(_, entry)| entry.0 == name)
            .map(|(key, entry)| (key.clone(), entry.1.clone()))
            .collect();
        found.sort_by(|a, b| a.1.cmp(&b.1));
        found
    }
}

impl Cellvisor {
    /// A copy of the configuration in force (the latest reload's), for a host that shapes
    /// what it offers by it (the MCP tools name only the enabled languages).
    pub fn config_now(&self) -> cellvisor_config::Config {
        lock(&self.config).clone()
    }

    /// `sessions.key` in force: what names a session's state (read at start; a host that
    /// fills in a default `cwd`, like the MCP server, asks it).
    pub fn session_key_by(&self) -> SessionKeyBy {
        self.session_key
    }

    /// Whether state is keyed by session name alone or by (name, cwd): read at start
    /// (`sessions.key` applies at restart).
    pub(super) fn keyed_by_cwd(&self) -> bool {
        self.session_key == SessionKeyBy::SessionCwd
    }

    /// The key a request's kept session runs under: the name, or under `session+cwd` the
    /// pair of the name and the request's cwd (which it must then carry).
    pub(super) fn eval_key(
        &self,
        name: &str,
        cwd: Option<&Path>,
    ) -> Result<SessionName, RequestError> {
        let name = SessionName::parse(name)?;
        if !self.keyed_by_cwd() {
            return Ok(name);
        }
        let cwd = cwd.ok_or_else(|| RequestError::CwdRequired(name.to_string()))?;
        let canonical = canonical_cwd(cwd)?;
        let key = pair_key(&name, &canonical);
        lock(&self.pairs).remember(&key, &name, &canonical);
        Ok(key)
    }

    /// The sessions a set method (`interrupt`, `reset`, `close`) acts on: the name, the
    /// pair its cwd names, or without cwd every pair of the name (live or known here).
    pub(super) async fn resolve_set(
        &self,
        session: SessionRef<'_>,
    ) -> Result<Vec<SessionName>, RequestError> {
        let name = super::policy::validate_session_name(session.name)?;
        if !self.keyed_by_cwd() {
            return Ok(vec![name]);
        }
        if let Some(cwd) = session.cwd {
            return Ok(vec![pair_key(&name, &canonical_cwd(cwd)?)]);
        }
        let mut keys: Vec<SessionName> = self
            .live_pairs_of(session.name)
            .await?
            .into_iter()
            .chain(lock(&self.pairs).of(session.name))
            .filter_map(|(key, _)| SessionName::parse_key(&key).ok())
            .collect();
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    /// The one session a method that needs one acts on: the name, the pair its cwd names,
    /// or without cwd the only live pair of the name (else the only one known here); several
    /// are refused with their cwds.
    pub(super) async fn resolve_one(
        &self,
        session: SessionRef<'_>,
    ) -> Result<SessionName, RequestError> {
        let name = super::policy::validate_session_name(session.name)?;
        if !self.keyed_by_cwd() {
            return Ok(name);
        }
        if let Some(cwd) = session.cwd {
            return Ok(pair_key(&name, &canonical_cwd(cwd)?));
        }
        let mut pairs = self.live_pairs_of(session.name).await?;
        if pairs.is_empty() {
            pairs = lock(&self.pairs).of(session.name);
        }
        match pairs.len() {
            0 => Err(RequestError::NoPair(session.name.to_string())),
            1 => Ok(SessionName::parse_key(&pairs.remove(0).0)?),
            _ => Err(RequestError::AmbiguousSession {
                session: session.name.to_string(),
                cwds: pairs.into_iter().map(|(_, cwd)| cwd).collect(),
            }),
        }
    }

    /// The live pairs of `name`, as (key, cwd), sorted by cwd.
    async fn live_pairs_of(&self, name: &str) -> Result<Vec<(String, PathBuf)>, RequestError> {
        let live = self
            .supervisor
            .send(LiveSessionNames)
            .await
            .map_err(|_| RequestError::Stopped)?;
        let pairs = lock(&self.pairs);
        let mut found: Vec<(String, PathBuf)> = live
            .into_iter()
            .filter(|key| split_pair(key).is_some_and(|(n, _)| n == name))
            .map(|key| {
                let cwd = pairs.cwd(&key).map(Path::to_path_buf).unwrap_or_default();
                (key, cwd)
            })
            .collect();
        found.sort_by(|a, b| a.1.cmp(&b.1));
        Ok(found)
    }

    /// `status` rows as hosts read them: a pair's row shows its session name and `cwd`.
    pub(super) fn show_pairs(&self, rows: &mut [SessionStatus]) {
        let pairs = lock(&self.pairs);
        for row in rows {
            let Some((name, _)) = split_pair(&row.session) else {
                continue;
            };
            row.cwd = pairs.cwd(&row.session).map(|cwd| cwd.display().to_string());
            row.session = name.to_string();
        }
    }

    /// The name hosts know a session key by (a pair's session name).
    pub(super) fn shown_name(key: &str) -> &str {
        split_pair(key).map_or(key, |(name, _)| name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_key_is_the_name_and_a_stable_hash_of_the_directory() {
        let name = |n: &str| SessionName::parse(n).expect("a name");
        let key = pair_key(&name("notes"), Path::new("/home/a/project"));
        assert_eq!(key, pair_key(&name("notes"), Path::new("/home/a/project")));
        // Stable across runs and nodes (snapshots and leases are found by it): the first 16
        // hex digits of SHA-256("/home/a/project").
        assert_eq!(key, "notes@12e16c2f90d46feb");
        assert_eq!(split_pair(&key), Some(("notes", "12e16c2f90d46feb")));
        assert_eq!(key.len(), "notes@".len() + 16);
        assert_ne!(key, pair_key(&name("notes"), Path::new("/home/a/project2")));
        assert_ne!(key, pair_key(&name("notes2"), Path::new("/home/a/project")));
    }

    #[test]
    fn no_plain_session_name_is_a_pair_key_or_looks_like_one() {
        let key = pair_key(&SessionName::parse("s").expect("name"), Path::new("/tmp"));
        assert!(super::super::policy::validate_session_name(&key).is_err());
        for plain in ["s", "a.b:c", "x-0123456789abcdef", "mcp-42"] {
            assert!(super::super::policy::validate_session_name(plain).is_ok());
            assert_eq!(split_pair(plain), None, "{plain}");
        }
        assert_eq!(split_pair("s@0123"), None);
        assert_eq!(split_pair("s@0123456789ABCDEF"), None);
        assert_eq!(split_pair("@0123456789abcdef"), None);
    }

    #[test]
    fn pairs_file_names_never_meet_each_other_or_a_plain_name() {
        let name = |n: &str| SessionName::parse(n).expect("a name");
        let a = pair_key(&name("a.b"), Path::new("/one")).dir_name();
        let b = pair_key(&name("a.b"), Path::new("/two")).dir_name();
        assert_ne!(a, b);
        assert!(a.contains('@') && b.contains('@'));
        // A plain name's file name never holds `@`.
        for plain in ["a.b", "a_b-0466522c", "a", "x:y"] {
            assert!(!name(plain).dir_name().contains('@'));
        }
    }

    #[test]
    fn the_canonical_directory_resolves_dots_and_links_and_refuses_what_is_missing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("real");
        std::fs::create_dir(&real).expect("mkdir");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        let canonical = canonical_cwd(&real).expect("real");
        assert_eq!(canonical_cwd(&link).expect("link"), canonical);
        assert_eq!(
            canonical_cwd(&real.join("..").join("real")).expect("dots"),
            canonical
        );
        let missing = dir.path().join("missing");
        assert_eq!(
            canonical_cwd(&missing),
            Err(RequestError::Cwd(missing.clone()))
        );
        let file = dir.path().join("file");
        std::fs::write(&file, "x").expect("write");
        assert_eq!(canonical_cwd(&file), Err(RequestError::Cwd(file.clone())));
    }

    #[test]
    fn known_pairs_are_listed_by_name_and_forgotten_by_key() {
        let mut pairs = Pairs::default();
        pairs.remember("s@1", "s", Path::new("/b"));
        pairs.remember("s@2", "s", Path::new("/a"));
        pairs.remember("t@3", "t", Path::new("/a"));
        let of_s: Vec<String> = pairs.of("s").into_iter().map(|(k, _)| k).collect();
        assert_eq!(of_s, ["s@2", "s@1"]);
        pairs.forget("s@2");
        assert_eq!(pairs.of("s").len(), 1);
        assert_eq!(pairs.cwd("t@3"), Some(Path::new("/a")));
        assert_eq!(pairs.cwd("s@2"), None);
    }

    #[test]
    fn the_oldest_pair_goes_first_when_too_many_are_known() {
        let mut pairs = Pairs::default();
        for i in 0..MAX_PAIRS {
            pairs.remember(&format!("s@{i}"), "s", Path::new("/x"));
        }
        pairs.remember("s@0", "s", Path::new("/x"));
        pairs.remember("new@x", "new", Path::new("/y"));
        assert_eq!(pairs.known.len(), MAX_PAIRS);
        assert!(pairs.cwd("s@0").is_some(), "used again: kept");
        assert!(pairs.cwd("s@1").is_none(), "the oldest: dropped");
    }
}
