//! What a commit whose answer was lost did, from what a read back found: plain data.
//!
//! A fenced commit's transaction may reach etcd and its answer never come back (its member
//! killed or stopped after it was sent). Answering it as failed when it landed would tell a
//! client its cell's state was not kept when a retry will find it kept; sending it again
//! could land a late copy after a later commit. So the node reads the lease key and the
//! commit's keys back from another member and decides here.

/// What the read back found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Found {
    /// The lease key's creating revision (0: the key is gone).
    pub lease_created: i64,
    /// Whether every key of the commit holds the value the commit put.
    pub all_put: bool,
}

/// What a commit whose answer was lost did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ReadBack {
    /// It landed: every key holds what it put (values name the blob or file, unique under
    /// the token, so nothing else wrote them).
    Committed,
    /// It did not land and never can: the lease key is gone or another holder's.
    Fenced,
    /// It did not land yet, but the lease is still this token's: it may still land while the
    /// lease lives (a stopped member that wakes), so the lease must be given up.
    NotApplied,
    /// No member answered the read back: unknown.
    Unread(String),
}

/// What a commit under `token` whose answer was lost did, given what was `found`.
pub(super) fn after_read_back(token: i64, found: Result<Found, String>) -> ReadBack {
    match found {
        Err(why) => ReadBack::Unread(why),
        Ok(found) if found.all_put => ReadBack::Committed,
        Ok(found) if found.lease_created == token => ReadBack::NotApplied,
        Ok(_) => ReadBack::Fenced,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(lease_created: i64, all_put: bool) -> Result<Found, String> {
        Ok(Found {
            lease_created,
            all_put,
        })
    }

    #[test]
    fn a_commit_read_back_in_place_committed_even_after_its_lease_went() {
        assert_eq!(after_read_back(7, found(7, true)), ReadBack::Committed);
        assert_eq!(after_read_back(7, found(0, true)), ReadBack::Committed);
        assert_eq!(after_read_back(7, found(9, true)), ReadBack::Committed);
    }

    #[test]
    fn a_commit_not_in_place_under_a_live_token_may_still_land() {
        assert_eq!(after_read_back(7, found(7, false)), ReadBack::NotApplied);
    }

    #[test]
    fn a_commit_not_in_place_once_the_token_is_gone_never_lands() {
        assert_eq!(after_read_back(7, found(0, false)), ReadBack::Fenced);
        assert_eq!(after_read_back(7, found(12, false)), ReadBack::Fenced);
    }

    #[test]
    fn a_read_back_nobody_answered_is_unknown() {
        assert_eq!(
            after_read_back(7, Err("no member".into())),
            ReadBack::Unread("no member".into())
        );
    }
}
