//! Rules between keys, checked once every value is merged.

use super::{KeyError, Origin, State};
use crate::keys::{self, KEYS};
use std::time::Duration;

/// Rules between keys, checked on the merged values; the error goes to the key of the pair
/// that was set (the first if both were), since that is the line to fix.
pub(super) fn check_rules(state: &mut State) {
    let s = &state.config.sessions;
    let c = &state.config.cells;
    let d = |d: Duration| keys::format_duration(d);
    let mut broken = Vec::new();
    if s.heartbeat_timeout <= s.heartbeat_interval {
        broken.push((
            ("sessions", ["heartbeat-timeout", "heartbeat-interval"]),
            format!(
                "sessions.heartbeat-timeout ({}) must be longer than sessions.heartbeat-interval \
                 ({}), or workers are declared dead between two pings",
                d(s.heartbeat_timeout),
                d(s.heartbeat_interval)
            ),
        ));
    }
    if c.min_timeout > c.default_timeout {
        broken.push((
            ("cells", ["default-timeout", "min-timeout"]),
            format!(
                "cells.default-timeout ({}) must be at least cells.min-timeout ({})",
                d(c.default_timeout),
                d(c.min_timeout)
            ),
        ));
    }
    if c.default_timeout > c.max_timeout {
        broken.push((
            ("cells", ["default-timeout", "max-timeout"]),
            format!(
                "cells.default-timeout ({}) must be at most cells.max-timeout ({})",
                d(c.default_timeout),
                d(c.max_timeout)
            ),
        ));
    }
    let f = &state.config.fleet;
    if f.leases == crate::schema::LeaseStore::Etcd && f.etcd_endpoints.is_empty() {
        broken.push((
            ("fleet", ["etcd-endpoints", "leases"]),
            "fleet.leases = \"etcd\" needs fleet.etcd-endpoints, like [\"http://127.0.0.1:2379\"]"
                .to_string(),
        ));
    }
    for ((section, pair), message) in broken {
        let indices: Vec<usize> = pair
            .iter()
            .filter_map(|key| keys::find(section, key).map(|(i, _)| i))
            .collect();
        if indices.iter().any(|&i| state.failed[i]) {
            continue;
        }
        let Some(&index) = indices
            .iter()
            .find(|&&i| state.origins[i] != Origin::Default)
            .or(indices.first())
        else {
            continue;
        };
        state.errors.push(KeyError {
            origin: state.origins[index].clone(),
            key: Some(KEYS[index].name()),
            message,
        });
    }
}
