//! A node that holds many sessions: a daemon configured with `max-sessions` in the thousands
//! opens hundreds of live sessions, each keeping its own state on its own worker, lists them
//! all in `status`, and closes them all on shutdown. Behaviour only: no timing is asserted.

mod common;

use common::daemon::{output, Daemon};
use common::World;
use serde_json::json;
use std::collections::HashSet;

/// Enough sessions to be far past the old cap of 256, few enough that a loaded two-core
/// machine starts them in seconds (a Lua worker starts in a few milliseconds).
const SESSIONS: usize = 300;

/// The daemon holds about four descriptors per live session: it inherits this process's
/// soft limit, raised here towards the hard one (a desktop's default soft limit, 1024, is too
/// few for 300 sessions).
fn room_for_descriptors() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct they are given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < 8192 {
            limit.rlim_cur = limit.rlim_max.min(8192);
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

#[test]
fn a_daemon_with_room_for_thousands_serves_hundreds_of_lua_sessions_and_lists_them() {
    room_for_descriptors();
    let daemon = Daemon::start_in(World::with_config(
        "[sessions]\n\
         max-sessions = 1200\n\
         idle-timeout = \"0s\"\n\
         shutdown-grace = \"500ms\"\n",
    ));
    let mut client = daemon.client();
    let name = |i: usize| format!("many-{i:03}");
    for i in 0..SESSIONS {
        let result = client.eval(
            &name(i),
            json!([{"language": "lua", "code": format!("x = {i}")}]),
        );
        assert_eq!(result["is_error"], false, "{result}");
    }
    // Every session kept its own state: none was evicted to make room for another.
    for i in 0..SESSIONS {
        let result = client.eval(&name(i), json!([{"language": "lua", "code": "x"}]));
        assert_eq!(
            output(&result, 0),
            format!("{i}\n"),
            "{}: {result}",
            name(i)
        );
    }
    let rows = client.call("status", json!({})).expect("status answered");
    let rows = rows.as_array().expect("status is a list");
    let listed: HashSet<&str> = rows
        .iter()
        .filter(|row| row["language"] == "lua")
        .filter_map(|row| row["session"].as_str())
        .collect();
    let expected: HashSet<String> = (0..SESSIONS).map(name).collect();
    let missing: Vec<&String> = expected
        .iter()
        .filter(|s| !listed.contains(s.as_str()))
        .collect();
    assert!(missing.is_empty(), "status does not list {missing:?}");
    let pids: HashSet<u64> = rows
        .iter()
        .filter(|row| row["language"] == "lua")
        .filter_map(|row| row["pid"].as_u64())
        .collect();
    assert_eq!(pids.len(), SESSIONS, "one live worker per session");
    daemon.stop();
}
