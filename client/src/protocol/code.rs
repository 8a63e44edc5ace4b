//! The error codes a response's `error.code` carries: JSON-RPC's own and cellvisor's, each
//! with what it means; the schema (`cellvisor protocol schema`) lists them from [`ALL`].

/// Declares each code as a constant and lists them all, with their meaning, in [`ALL`].
macro_rules! codes {
    ($( $(#[doc = $doc:literal])* $name:ident = $value:expr; )*) => {
        $( $(#[doc = $doc])* pub const $name: i64 = $value; )*

        /// Every code: its constant's name, its value and what it means.
        pub const ALL: &[(&str, i64, &str)] = &[
            $( (stringify!($name), $value, concat!($($doc, "\n"),*)) ),*
        ];
    };
}

codes! {
    /// The line is not JSON.
    PARSE_ERROR = -32700;
    /// The JSON is not a JSON-RPC request.
    INVALID_REQUEST = -32600;
    /// No such method.
    METHOD_NOT_FOUND = -32601;
    /// The parameters are not what the method takes; the message says what is allowed.
    INVALID_PARAMS = -32602;
    /// The daemon failed on its own; the message says how.
    INTERNAL_ERROR = -32603;
    /// The request was understood but refused (bad session name, missing cwd, ...).
    REQUEST_REFUSED = -32001;
    /// The daemon is shutting down.
    SHUTTING_DOWN = -32002;
    /// The daemon is draining: it takes no new session, so a router may retry elsewhere;
    /// sessions it already holds are still served.
    DRAINING = -32003;
    /// The connection is bound to one session (`Cellvisor-Session` on its upgrade) and the
    /// request named another.
    WRONG_SESSION = -32004;
    /// Another node of the fleet holds the session's lease: `data.node` names it, and
    /// `data.retry_after_ms` says when its lease runs out unless that node renews it.
    LEASED_ELSEWHERE = -32005;
    /// The request said `resume` and the session is neither live here nor saved.
    SESSION_UNKNOWN = -32006;
    /// The client speaks another protocol version than the daemon (a daemon left running
    /// across an upgrade): `data` names both ([`VersionMismatch`](crate::protocol::VersionMismatch)).
    PROTOCOL_MISMATCH = -32007;
    /// The caller's tenant lacks the right the method needs: `data.right` names it
    /// (`cells` or `operate`), `data.tenant` the tenant.
    FORBIDDEN = -32009;
    /// The caller's tenant is at one of its quotas: `data.quota` names it, `data.tenant`
    /// the tenant, `data.limit` its value.
    QUOTA_EXCEEDED = -32008;
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_code_is_listed_once_with_its_meaning() {
        let mut values: Vec<i64> = super::ALL.iter().map(|(_, value, _)| *value).collect();
        values.sort_unstable();
        values.dedup();
        assert_eq!(values.len(), super::ALL.len());
        assert!(super::ALL.iter().all(|(_, _, doc)| !doc.trim().is_empty()));
        assert!(super::ALL.contains(&(
            "METHOD_NOT_FOUND",
            super::METHOD_NOT_FOUND,
            " No such method.\n"
        )));
    }
}
