//! The resource verdict end to end, through the daemon and real workers: every cell result of
//! the three languages carries a plausible `usage`, and a cell that memory ended (the worker
//! tree over `[limits] max-rss`, the JavaScript heap limit, the Lua heap limit) is reported
//! with a typed `out_of_memory` naming the limit and the figures, which the CLI says in one
//! line.

mod common;

use common::daemon::{cell, Daemon};
use serde_json::{json, Value};

const MIB: u64 = 1024 * 1024;

fn usage(cell: &Value) -> &Value {
    let usage = &cell["usage"];
    assert!(usage.is_object(), "no usage: {cell:#}");
    usage
}

fn number(value: &Value, field: &str) -> f64 {
    value[field]
        .as_f64()
        .unwrap_or_else(|| panic!("`{field}` is not a number: {value:#}"))
}

/// The verdict of `cell`: the limit's name, its bytes and what was used.
fn verdict(cell: &Value) -> (&str, u64, u64) {
    let oom = &cell["out_of_memory"];
    let field = |name: &str| {
        oom[name]
            .as_u64()
            .unwrap_or_else(|| panic!("`out_of_memory.{name}` missing: {cell:#}"))
    };
    (
        oom["limit"].as_str().unwrap_or_default(),
        field("limit_bytes"),
        field("used_bytes"),
    )
}

#[test]
fn ordinary_results_of_every_language_carry_a_plausible_usage() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let cells = json!([
        {"language": "py", "code": "print('hello')"},
        {"language": "js", "code": "print('hello')"},
        {"language": "lua", "code": "print('hello')"},
        // CPU time the cell surely spends, whatever else runs on the machine.
        {"language": "py", "code": "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"},
        {"language": "lua", "code": "local t = os.clock() while os.clock() - t < 0.3 do end"},
    ]);
    let result = client.eval("s", cells);
    for index in 0..5 {
        let cell = cell(&result, index);
        assert_eq!(cell["status"], "complete", "{result:#}");
        assert!(cell.get("out_of_memory").is_none(), "{cell:#}");
        let usage = usage(cell);
        assert!(number(usage, "cpu_ms") >= 0.0, "{cell:#}");
        assert!(number(usage, "wall_ms") >= 0.0, "{cell:#}");
        assert_eq!(usage["wall_ms"], cell["duration_ms"], "{cell:#}");
        // Every worker holds at least its engine in memory.
        assert!(number(usage, "peak_rss_bytes") > MIB as f64, "{cell:#}");
        let written = cell["output"].as_str().unwrap_or_default().len() as u64;
        assert_eq!(usage["output_bytes"].as_u64(), Some(written), "{cell:#}");
        // None of these cells starts a process.
        assert_eq!(usage["processes_seen"].as_u64(), Some(0), "{cell:#}");
    }
    for index in [3, 4] {
        let spent = number(usage(cell(&result, index)), "cpu_ms");
        // 300 ms of CPU, read in clock ticks (10 ms) at either end.
        assert!(spent >= 250.0, "cell {index} spent {spent} ms: {result:#}");
    }
    daemon.stop();
}

#[test]
fn a_python_cell_over_max_rss_is_out_of_memory_with_the_figure() {
    let daemon = Daemon::start_with("[limits]\nmax-rss = \"100MiB\"\n");
    let mut client = daemon.client();
    let hog = "import time\nhog = bytearray(300 * 1024 * 1024)\n\
               for i in range(len(hog) // 4096): hog[i * 4096] = 1\ntime.sleep(20)";
    let result = client.eval("s", json!([{"language": "py", "code": hog, "timeout": 30}]));
    let cell = cell(&result, 0);
    assert!(
        cell["status"] == "error" || cell["status"] == "cancelled",
        "{result:#}"
    );
    let (limit, limit_bytes, used) = verdict(cell);
    assert_eq!(limit, "max_rss", "{cell:#}");
    assert_eq!(limit_bytes, 100 * MIB, "{cell:#}");
    assert!(used > limit_bytes, "used {used} of {limit_bytes}: {cell:#}");
    // The peak seen is at least what the cap was passed with.
    assert!(
        usage(cell)["peak_rss_bytes"].as_u64() >= Some(used),
        "{cell:#}"
    );
    // The session goes on, on a new worker, without a verdict for an ordinary cell.
    let after = client.eval("s", json!([{"language": "py", "code": "print(1)"}]));
    assert_eq!(after["cells"][0]["output"], "1\n", "{after:#}");
    assert!(
        after["cells"][0].get("out_of_memory").is_none(),
        "{after:#}"
    );
    daemon.stop();
}

#[test]
fn a_javascript_cell_over_its_heap_limit_is_out_of_memory_and_the_cli_says_so() {
    let daemon = Daemon::start_with("[js]\nmemory-limit = \"64MiB\"\n");
    let mut client = daemon.client();
    let exhaust = "let a = []; while (true) a.push(new Array(1e6).fill(1))";
    let result = client.eval("s", json!([{"language": "js", "code": exhaust}]));
    let cell = cell(&result, 0);
    assert_eq!(cell["status"], "error", "{result:#}");
    let (limit, limit_bytes, used) = verdict(cell);
    assert_eq!((limit, limit_bytes), ("js_heap", 64 * MIB), "{cell:#}");
    assert!(used > 32 * MIB && used <= 64 * MIB, "{cell:#}");
    assert!(
        usage(cell)["peak_rss_bytes"].as_u64() > Some(32 * MIB),
        "{cell:#}"
    );
    drop(client);

    // The CLI prints the verdict in one line.
    let run = daemon
        .world
        .command()
        .args(["eval", "-l", "js", "-s", "cli", "--socket"])
        .arg(&daemon.socket)
        .arg(exhaust)
        .output()
        .expect("run cellvisor eval");
    let stderr = String::from_utf8_lossy(&run.stderr);
    let line = stderr
        .lines()
        .find(|line| line.contains("out of memory: 64 MiB limit ([js] memory-limit)"))
        .unwrap_or_else(|| panic!("no verdict line on stderr: {stderr}"));
    assert!(
        line.starts_with("(out of memory: ") && line.ends_with(" used)"),
        "{line}"
    );
    daemon.stop();
}

#[test]
fn a_lua_cell_over_its_memory_limit_is_out_of_memory_with_the_figure() {
    let daemon = Daemon::start_with("[lua]\nmemory-limit = \"32MiB\"\n");
    let mut client = daemon.client();
    let exhaust = "local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 100) .. i end";
    let result = client.eval(
        "s",
        json!([{"language": "lua", "code": exhaust}, {"language": "lua", "code": "print(2)"}]),
    );
    let cell0 = cell(&result, 0);
    assert_eq!(cell0["status"], "error", "{result:#}");
    let (limit, limit_bytes, used) = verdict(cell0);
    assert_eq!((limit, limit_bytes), ("lua_heap", 32 * MIB), "{cell0:#}");
    assert!(used > 16 * MIB && used <= 32 * MIB, "{cell0:#}");
    assert!(cell0["output"]
        .as_str()
        .unwrap_or_default()
        .contains("not enough memory"));
    let after = client.eval("s", json!([{"language": "lua", "code": "print(2)"}]));
    assert_eq!(after["cells"][0]["output"], "2\n", "{after:#}");
    assert!(after["cells"][0].get("out_of_memory").is_none());
    daemon.stop();
}
