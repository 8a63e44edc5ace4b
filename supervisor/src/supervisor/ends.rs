//! Sessions that ended (closed, evicted, stopped with the daemon), told as they end to
//! whoever follows them: a host that shows a session elsewhere (the Jupyter gateway's
//! kernels) drops it then, instead of asking over and over whether it still runs.

use crate::names::split_pair;
use crate::session::SessionKey;
use cellvisor_ipc::Language;
use tokio::sync::broadcast;

/// Ends a follower may fall behind by before it misses some (it is told it lagged).
const ENDS_BACKLOG: usize = 256;

/// One session's worker for one language that is gone with its actor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionEnded {
    /// The session's name as hosts know it (a `session+cwd` pair's name, without its key).
    pub session: String,
    /// The language whose worker ended.
    pub language: Language,
}

/// The broadcast of [`SessionEnded`]; sending costs nothing when nobody follows.
#[derive(Debug, Clone)]
pub struct SessionEnds(broadcast::Sender<SessionEnded>);

impl Default for SessionEnds {
    fn default() -> SessionEnds {
        SessionEnds(broadcast::channel(ENDS_BACKLOG).0)
    }
}

impl SessionEnds {
    /// Tells the followers that the session `key` ended.
    pub(crate) fn tell(&self, key: &SessionKey) {
        let name = key.session.as_str();
        let session = split_pair(name).map_or(name, |(name, _)| name).to_string();
        let _ = self.0.send(SessionEnded {
            session,
            language: key.language,
        });
    }

    /// Every end from now on.
    pub fn follow(&self) -> broadcast::Receiver<SessionEnded> {
        self.0.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::SessionName;

    #[test]
    fn an_end_names_the_session_as_hosts_know_it() {
        let ends = SessionEnds::default();
        let mut follower = ends.follow();
        let plain = SessionKey {
            session: SessionName::parse("agent").expect("a name"),
            language: Language::Lua,
        };
        ends.tell(&plain);
        let pair = SessionKey {
            session: SessionName::pair(&plain.session, std::path::Path::new("/tmp")),
            language: Language::Python,
        };
        ends.tell(&pair);
        let seen = [follower.try_recv(), follower.try_recv()];
        assert_eq!(
            seen.map(|s| s.ok()),
            [
                Some(SessionEnded {
                    session: "agent".into(),
                    language: Language::Lua
                }),
                Some(SessionEnded {
                    session: "agent".into(),
                    language: Language::Python
                }),
            ]
        );
    }
}
