//! A cell that exhausts its worker's file descriptors (issue 42 item 5): the session
//! recovers by itself, the next cell running on a fresh worker whose notice says why, and a
//! helper that hit EMFILE says so, under `--no-daemon` as through the daemon.

mod common;

use common::World;
use serde_json::json;
use std::time::Duration;

/// Opens files until EMFILE, keeping them, then calls a helper in the same state.
const EXHAUST_PY: &str =
    "held = []\ntry:\n    while True:\n        held.append(open('/dev/null'))\n\
except OSError as e:\n    print('cell:', e.strerror)\ntry:\n    read('/etc/hostname')\n\
except OSError as e:\n    print('helper:', e)\n";

const EXHAUST_LUA: &str = "held = {}\nwhile true do local f = io.open('/dev/null') if not f then break end held[#held + 1] = f end\n\
local ok, err = pcall(read, '/etc/hostname')\nprint('helper:', err)";

#[test]
fn a_session_out_of_descriptors_recovers_by_itself_with_a_notice() {
    let world = World::new();
    let run = world.run_cells(&json!([
        {"language": "py", "code": EXHAUST_PY},
        {"language": "py", "code": "import subprocess\nprint(subprocess.run(['echo', 'fresh'], capture_output=True, text=True).stdout, end='')\nprint('held' in globals())"},
        {"language": "lua", "code": EXHAUST_LUA},
        {"language": "lua", "code": "print('lua fresh', held == nil)"},
    ]));
    let result = run.json();
    let cells = common::cells(&result);
    let first = cells[0]["output"].as_str().unwrap_or_default();
    assert!(first.contains("cell: Too many open files"), "{result:#}");
    assert!(
        first.contains("helper: ") && first.contains("Too many open files"),
        "the helper's error says EMFILE: {result:#}"
    );
    assert_eq!(cells[1]["status"], "complete", "{result:#}");
    assert_eq!(cells[1]["output"], "fresh\nFalse\n", "{result:#}");
    let notice = cells[1]["notice"].as_str().unwrap_or_default();
    assert!(
        notice.contains("the worker was replaced") && notice.contains("file descriptors"),
        "{result:#}"
    );
    let lua = cells[2]["output"].as_str().unwrap_or_default();
    assert!(
        lua.contains("helper:") && lua.contains("Too many open files"),
        "{result:#}"
    );
    assert_eq!(cells[3]["output"], "lua fresh\ttrue\n", "{result:#}");
    assert!(
        cells[3]["notice"]
            .as_str()
            .unwrap_or_default()
            .contains("file descriptors"),
        "{result:#}"
    );
    world.assert_no_processes_left(Duration::from_secs(5));
}
