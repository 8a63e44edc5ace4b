//! `cellvisor check` end to end: the real binary runs suites of cells on real python3, QuickJS
//! and Lua workers, scores them, and writes artifacts and the summary.

mod common;

use common::{path_str, World};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

const SETTLE: Duration = Duration::from_secs(5);

fn examples(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/check")
        .join(name)
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

fn write_suite(world: &World, name: &str, text: &str) -> PathBuf {
    let path = world.dir.path().join(name);
    std::fs::write(&path, text).expect("suite file");
    path
}

/// The first line of the printed table that `wanted` accepts.
fn table_line(stdout: &str, wanted: impl Fn(&str) -> bool) -> &str {
    stdout
        .lines()
        .find(|l| wanted(l))
        .unwrap_or_else(|| panic!("no such line in:\n{stdout}"))
}

fn case<'a>(summary: &'a Value, id: &str) -> &'a Value {
    summary["cases"]
        .as_array()
        .and_then(|cases| cases.iter().find(|c| c["id"] == id))
        .unwrap_or_else(|| panic!("no case {id} in {summary:#}"))
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

#[test]
fn the_example_suites_pass_and_leave_their_artifacts() {
    let world = World::new();
    let out = world.dir.path().join("out");
    let examples_dir = examples("");
    let run = world.run(&[
        "check",
        path_str(&examples_dir),
        "--out",
        path_str(&out),
        "--concurrency",
        "2",
    ]);
    run.assert_code(0);
    for row in [
        "python/helpers-read-and-write",
        "javascript/displays",
        "lua/timeout-cancels",
        "python/crash-is-an-error",
    ] {
        let line = table_line(&run.stdout, |l| l.contains(row));
        assert!(line.starts_with("pass"), "{line}");
    }
    assert!(run.stdout.contains("\n@efficiency "), "{}", run.stdout);
    assert!(
        run.stdout.contains(" passed, 0 failed (100.0%)"),
        "{}",
        run.stdout
    );

    let summary = read_json(&out.join("summary.json"));
    let count = summary["count"].as_u64().unwrap_or_default();
    assert!(count >= 15, "{summary:#}");
    assert_eq!(summary["passed"].as_u64(), Some(count));
    assert_eq!(summary["pass_rate"], 1.0);
    assert_eq!(summary["variants"][0]["variant"], "default");
    assert!(
        summary["comparison"].is_null(),
        "one variant, nothing to compare"
    );
    for language in [
        "py",
        "js",
        "lua",
        "supervision",
        "display",
        "helpers",
        "code-mode",
    ] {
        assert_eq!(summary["tag_scores"][language], 1.0, "{language}");
    }
    let metric_ids: Vec<&str> = summary["metrics"]
        .as_array()
        .map(|m| m.iter().filter_map(|m| m["id"].as_str()).collect())
        .unwrap_or_default();
    assert!(metric_ids.contains(&"cell-time"), "{metric_ids:?}");
    let cell_time = &summary["metrics"][0]["raw"];
    for stat in ["min", "mean", "p50", "p90", "max"] {
        assert!(cell_time[stat].is_f64(), "{stat}: {cell_time}");
    }

    let dir = out.join("default/python/helpers-read-and-write");
    let result = read_json(&dir.join("result.json"));
    assert_eq!(result["passed"], true);
    assert_eq!(result["case"]["id"], "helpers-read-and-write");
    assert_eq!(result["cells"][0]["status"], "complete");
    let names = strings(&Value::Array(
        result["scores"]
            .as_array()
            .map(|s| s.iter().map(|s| s["name"].clone()).collect())
            .unwrap_or_default(),
    ))
    .into_iter()
    .map(str::to_string)
    .collect::<Vec<_>>();
    assert!(
        names.contains(&"file.contains:report.txt".to_string()),
        "{names:?}"
    );
    let total = result["metrics"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["id"] == "total"))
        .expect("total metric");
    assert_eq!(total["raw"], 60.0);

    let events = std::fs::read_to_string(dir.join("events.jsonl")).expect("events.jsonl");
    let events: Vec<Value> = events
        .lines()
        .map(|l| serde_json::from_str(l).expect("event line is JSON"))
        .collect();
    assert_eq!(
        events.first().map(|e| &e["event"]),
        Some(&"cell_started".into())
    );
    assert_eq!(
        events.last().map(|e| &e["event"]),
        Some(&"cell_done".into())
    );
    assert!(events
        .iter()
        .all(|e| e["at"].is_string() && e["elapsed_ms"].is_f64()));
    assert!(events
        .iter()
        .any(|e| e["event"] == "status" && e["status"]["op"] == "write"));
    let elapsed: Vec<f64> = events
        .iter()
        .filter_map(|e| e["elapsed_ms"].as_f64())
        .collect();
    assert!(elapsed.windows(2).all(|w| w[0] <= w[1]), "{elapsed:?}");

    let workspace = read_json(&dir.join("workspace.json"));
    let files = workspace["files"].as_array().expect("files");
    let report = files
        .iter()
        .find(|f| f["path"] == "report.txt")
        .expect("report.txt captured");
    assert_eq!(report["content"], "total = 60\n");
    assert!(
        files.iter().any(|f| f["path"] == "sales.csv"),
        "seed copied"
    );

    let setup_phase = std::fs::read_to_string(out.join("default/lua/state-persists/events.jsonl"))
        .expect("lua events");
    assert!(setup_phase.contains("\"phase\":\"setup\""), "{setup_phase}");
    assert!(setup_phase.contains("\"phase\":\"cells\""), "{setup_phase}");
    world.assert_no_processes_left(SETTLE);
}

#[test]
fn a_broken_case_names_its_scorer_and_exits_1() {
    let world = World::new();
    let broken = examples("broken");
    let run = world.run(&["check", path_str(&broken)]);
    run.assert_code(1);
    let row = table_line(&run.stdout, |l| l.contains("broken/wrong-answer"));
    assert!(row.starts_with("FAIL"), "{row}");
    assert!(row.ends_with("output.contains:43"), "{row}");
    assert!(
        run.stdout
            .contains("output.contains:43: output was \"42\\n\""),
        "the reason is shown: {}",
        run.stdout
    );
    world.assert_no_processes_left(SETTLE);
}

const EVERY_KIND: &str = r#"
suite = "kinds"

[[case]]
id = "all-pass"
workspace = "seed"
cells = [
  { language = "py", code = "write('out.txt', 'hello file\\n')\nprint('answer 42')" },
  { language = "lua", code = "display({k = 1})" },
  { language = "js", code = "store('kept', {a: 1})" },
]
scorers = [
  { kind = "status", expect = "complete" },
  { kind = "output_contains", text = "answer" },
  { kind = "output_matches", pattern = "answer \\d+" },
  { kind = "output_equals", text = "answer 42", cell = 0 },
  { kind = "display_has", mime = "application/json", cell = 1 },
  { kind = "file_exists", path = "seeded.txt" },
  { kind = "file_contains", path = "out.txt", text = "hello file" },
  { kind = "duration_below_ms", ms = 60000 },
  { kind = "no_restart" },
  { kind = "status_event", op = "write", path = "out.txt" },
  { kind = "status_event", op = "store", cell = 2 },
]

[[case]]
id = "all-fail"
cells = [{ language = "js", code = "console.log('nothing much')" }]
scorers = [
  { kind = "status", expect = "error" },
  { kind = "output_contains", text = "answer" },
  { kind = "output_matches", pattern = "^\\d+$" },
  { kind = "output_equals", text = "something" },
  { kind = "display_has", mime = "image/png" },
  { kind = "file_exists", path = "out.txt" },
  { kind = "file_contains", path = "out.txt", text = "x" },
  { kind = "duration_below_ms", ms = 0.000001 },
  { kind = "status_event", op = "write" },
  { kind = "no_restart", cell = 0, name = "restart-free" },
]

[[case]]
id = "restarted"
setup = [{ language = "py", code = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)" }]
cells = [{ language = "py", code = "print('after')" }]
scorers = [{ kind = "no_restart" }]

[[case]]
id = "captures-only-what-it-names"
capture = ["kept"]
cells = [{ language = "lua", code = "write('kept/a.txt', 'a')\nwrite('dropped.txt', 'b')" }]
scorers = [
  { kind = "file_exists", path = "kept/a.txt" },
  { kind = "file_exists", path = "dropped.txt" },
]

[[case]]
id = "setup-fails"
setup = [{ language = "lua", code = "error('no setup for you')" }]
cells = [{ language = "lua", code = "print(1)" }]
scorers = [{ kind = "status", expect = "complete" }]
"#;

#[test]
fn every_scorer_kind_passes_and_fails_as_written() {
    let world = World::new();
    let seed = world.dir.path().join("seed");
    std::fs::create_dir_all(&seed).expect("seed");
    std::fs::write(seed.join("seeded.txt"), "from the seed").expect("seed file");
    let suite = write_suite(&world, "kinds.toml", EVERY_KIND);
    let run = world.run(&["check", path_str(&suite), "--json"]);
    run.assert_code(1);
    let summary = run.json();
    assert_eq!(summary["count"], 5);

    let pass = case(&summary, "all-pass");
    assert_eq!(pass["passed"], true, "{pass:#}");
    assert_eq!(pass["score"], 1.0);

    let fail = case(&summary, "all-fail");
    assert_eq!(fail["passed"], false);
    assert_eq!(
        strings(&fail["failed_scorers"]),
        [
            "status:error",
            "output.contains:answer",
            "output.matches:^\\d+$",
            "output.equals",
            "display.has:image/png",
            "file.exists:out.txt",
            "file.contains:out.txt",
            "duration.below:0.000001ms",
            "status_event:write",
        ],
        "every scorer but no_restart fails: {fail:#}"
    );
    assert_eq!(
        fail["failures"][0]["details"],
        "expected error, got complete"
    );
    assert_eq!(
        fail["failures"][3]["details"],
        "expected \"something\", got \"nothing much\\n\""
    );
    let score = fail["score"].as_f64().unwrap_or(1.0);
    assert!(score > 0.09 && score < 0.2, "one of ten passed: {score}");

    // The setup crashed the worker, so setup failed: the case fails on `setup`, not later.
    let restarted = case(&summary, "restarted");
    assert_eq!(strings(&restarted["failed_scorers"]), ["setup"]);
    let captured = case(&summary, "captures-only-what-it-names");
    assert_eq!(
        strings(&captured["failed_scorers"]),
        ["file.exists:dropped.txt"]
    );
    let stores = world.dir.path().join("state/cellvisor/store");
    let left: Vec<_> = std::fs::read_dir(&stores)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "a case's store goes with it: {left:?}");
    let setup = case(&summary, "setup-fails");
    assert_eq!(strings(&setup["failed_scorers"]), ["setup"]);
    let reason = setup["error"].as_str().unwrap_or_default();
    assert!(reason.contains("setup cell 0 ended error"), "{reason}");
    assert!(reason.contains("no setup for you"), "{reason}");
    world.assert_no_processes_left(SETTLE);
}

#[test]
fn no_restart_fails_when_a_cell_reports_a_restart() {
    let world = World::new();
    // Setup completes and leaves a timer that kills the Python worker (the shim, the runner's
    // parent) a moment later, while a JavaScript cell runs; the Python cell after it runs on
    // a new worker, with a notice.
    let suite = write_suite(
        &world,
        "restart.json",
        r#"{"suite": "restart", "cases": [{
            "id": "killed-between-cells",
            "setup": [{"language": "py",
                       "code": "import os, threading\nthreading.Timer(0.3, lambda: os.kill(os.getppid(), 9)).start()"}],
            "cells": [
                {"language": "js", "code": "const end = Date.now() + 2500; while (Date.now() < end) {}"},
                {"language": "py", "code": "print('after')"}
            ],
            "scorers": [
                {"kind": "status", "expect": "complete"},
                {"kind": "output_contains", "text": "after"},
                {"kind": "no_restart", "cell": 0},
                {"kind": "no_restart"}
            ]}]}"#,
    );
    let run = world.run(&["check", path_str(&suite), "--json"]);
    run.assert_code(1);
    let summary = run.json();
    let killed = case(&summary, "killed-between-cells");
    assert_eq!(
        strings(&killed["failed_scorers"]),
        ["no_restart"],
        "{killed:#}"
    );
    assert_eq!(killed["score"], 0.75);
    world.assert_no_processes_left(SETTLE);
}

#[test]
fn declared_variants_run_side_by_side() {
    let world = World::new();
    let out = world.dir.path().join("out");
    let compare = examples("compare");
    let run = world.run(&["check", path_str(&compare), "--out", path_str(&out)]);
    run.assert_code(1);
    let header = table_line(&run.stdout, |l| l.starts_with("case "));
    assert!(
        header.contains("wide") && header.contains("narrow"),
        "{header}"
    );
    assert!(header.ends_with("diff (narrow - wide)"), "{header}");
    let row = table_line(&run.stdout, |l| {
        l.starts_with("output-cap/line-100-visible")
    });
    assert!(
        row.contains("pass 1.00") && row.contains("FAIL 0.50"),
        "{row}"
    );
    assert!(row.ends_with("-0.50"), "{row}");

    let summary = read_json(&out.join("summary.json"));
    let variants = summary["variants"].as_array().expect("variants");
    assert_eq!(variants.len(), 2);
    assert_eq!(variants[0]["variant"], "wide");
    assert_eq!(variants[0]["passed"], 2);
    assert_eq!(variants[1]["variant"], "narrow");
    assert_eq!(variants[1]["passed"], 1);
    assert_eq!(summary["comparison"]["variants"][0], "wide");
    for variant in ["wide", "narrow"] {
        let result = out
            .join(variant)
            .join("output-cap/line-100-visible/result.json");
        assert_eq!(read_json(&result)["variant"], variant);
    }
    let narrow = read_json(&out.join("narrow/output-cap/line-100-visible/result.json"));
    assert_eq!(narrow["cells"][0]["truncation"]["truncated"], true);
    let whole =
        std::fs::read_to_string(out.join("narrow/output-cap/line-100-visible/cell-0-output.txt"))
            .expect("the spilled output is kept with the case");
    assert!(whole.contains("line 100\n"), "{whole}");
    assert!(!out
        .join("wide/output-cap/line-100-visible/cell-0-output.txt")
        .exists());
    world.assert_no_processes_left(SETTLE);
}

#[test]
fn repeat_and_variant_flags_give_each_run_a_fresh_session() {
    let world = World::new();
    let out = world.dir.path().join("out");
    let lean = write_suite(&world, "lean.toml", "[sessions]\nmax-sessions = 1\n");
    let roomy = write_suite(&world, "roomy.toml", "[sessions]\nmax-sessions = 4\n");
    let suite = write_suite(
        &world,
        "fresh.toml",
        r#"
[[case]]
id = "counts-from-one"
cells = [{ language = "lua", code = "n = (n or 0) + 1\nprint(n)" }]
scorers = [{ kind = "output_equals", text = "1" }]

[[case]]
id = "js-too"
cells = [{ language = "js", code = "globalThis.n = (globalThis.n ?? 0) + 1; n" }]
scorers = [{ kind = "output_equals", text = "1" }]
"#,
    );
    let variant_lean = format!("lean={}", path_str(&lean));
    let variant_roomy = format!("roomy={}", path_str(&roomy));
    let run = world.run(&[
        "check",
        path_str(&suite),
        "--repeat",
        "3",
        "--concurrency",
        "3",
        "--variant",
        &variant_lean,
        "--variant",
        &variant_roomy,
        "--out",
        path_str(&out),
        "--json",
    ]);
    run.assert_code(0);
    assert!(
        run.stderr
            .contains("variant lean: --concurrency 3 lowered to 1"),
        "{}",
        run.stderr
    );
    let summary = run.json();
    assert_eq!(summary["count"], 12, "2 cases x 3 repeats x 2 variants");
    assert_eq!(summary["passed"], 12);
    let repeats: Vec<u64> = summary["cases"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter(|c| c["variant"] == "lean" && c["id"] == "counts-from-one")
                .filter_map(|c| c["repeat"].as_u64())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(repeats, [1, 2, 3]);
    assert_eq!(summary["comparison"]["rows"][0]["cells"][0]["runs"], 3);
    for n in 1..=3 {
        let dir = out.join(format!("roomy/fresh/counts-from-one/repeat-{n}"));
        assert_eq!(read_json(&dir.join("result.json"))["repeat"], n);
    }
    world.assert_no_processes_left(SETTLE);
}

#[test]
fn bad_input_is_reported_with_its_position_and_exit_2() {
    let world = World::new();
    let toml = write_suite(
        &world,
        "bad.toml",
        "[[case]]\nid = \"a\"\ncells = [{ language = \"py\", code = \"1\" }]\nscorers = [{ kind = \"output_has\", text = \"1\" }]\n",
    );
    let run = world.run(&["check", path_str(&toml)]);
    run.assert_code(2);
    let expected = format!("error: {}:4:", path_str(&toml));
    assert!(run.stderr.starts_with(&expected), "{}", run.stderr);
    assert!(run.stderr.contains("output_has"), "{}", run.stderr);
    assert!(
        run.stderr.contains("output_contains"),
        "names what is allowed: {}",
        run.stderr
    );

    let json = write_suite(&world, "bad.json", "{\"cases\": [\n  {\"id\": \"a\",,}\n]}");
    let run = world.run(&["check", path_str(&json)]);
    run.assert_code(2);
    let expected = format!("error: {}:2:", path_str(&json));
    assert!(run.stderr.starts_with(&expected), "{}", run.stderr);

    let good = write_suite(
        &world,
        "good.toml",
        "[[case]]\nid = \"a\"\ncells = [{ language = \"lua\", code = \"print(1)\" }]\nscorers = [{ kind = \"output_equals\", text = \"1\" }]\n",
    );
    for (flag, message) in [
        ("nameonly", "expected NAME=CONFIG"),
        ("a b=x.toml", "invalid variant name"),
        (
            "x=/no/such/config.toml",
            "variant x: cannot read config file",
        ),
    ] {
        let run = world.run(&["check", path_str(&good), "--variant", flag]);
        run.assert_code(2);
        assert!(run.stderr.contains(message), "{flag}: {}", run.stderr);
    }
    let run = world.run(&["check", path_str(&good), path_str(&good)]);
    run.assert_code(2);
    assert!(
        run.stderr.contains("is also the suite of"),
        "{}",
        run.stderr
    );
    let run = world.run(&["check", path_str(&good), "--repeat", "0"]);
    run.assert_code(2);
    let missing = world.dir.path().join("missing");
    let run = world.run(&["check", path_str(&missing)]);
    run.assert_code(2);
    assert!(run.stderr.contains("cannot read"), "{}", run.stderr);
    assert!(world.processes().is_empty());
}

#[test]
fn ctrl_c_stops_the_run_and_reports_what_finished() {
    let world = World::new();
    let out = world.dir.path().join("out");
    let suite = write_suite(
        &world,
        "slow.toml",
        r#"
[[case]]
id = "a-quick"
cells = [{ language = "lua", code = "print('quick')" }]
scorers = [{ kind = "output_equals", text = "quick" }]

[[case]]
id = "b-slow"
cells = [{ language = "py", code = "import time\ntime.sleep(60)", timeout = 120 }]
scorers = [{ kind = "status", expect = "complete" }]
"#,
    );
    let tmp = world.dir.path().join("tmp");
    std::fs::create_dir_all(&tmp).expect("tmp");
    let child = world
        .command()
        .env("TMPDIR", &tmp)
        .args(["check", path_str(&suite), "--out", path_str(&out)])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn cellvisor check");
    let pid = child.id().to_string();
    // The slow case is running once its Python worker is up.
    let started = common::wait_until(Duration::from_secs(30), || {
        let quick_done = out.join("default/slow/a-quick/result.json").exists();
        let python_up = world.processes().len() >= 3;
        (quick_done && python_up).then_some(()).ok_or(())
    });
    assert!(started.is_ok(), "the slow case never started");
    std::thread::sleep(Duration::from_millis(300));
    let workspaces = || -> Vec<std::ffi::OsString> {
        std::fs::read_dir(&tmp)
            .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .filter(|name| name.to_string_lossy().starts_with("cellvisor-check-"))
            .collect()
    };
    assert_eq!(
        workspaces().len(),
        1,
        "the slow case's workspace, while it runs"
    );
    let _ = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status();
    let run = common::Run::from(child.wait_with_output().expect("wait"));
    run.assert_code(130);
    assert!(
        run.stderr
            .contains("interrupted: 1 of 2 case runs finished"),
        "{}",
        run.stderr
    );
    assert!(
        run.stdout.contains("1 case: 1 passed, 0 failed"),
        "{}",
        run.stdout
    );
    let summary = read_json(&out.join("summary.json"));
    assert_eq!(summary["count"], 1);
    assert_eq!(summary["cases"][0]["id"], "a-quick");
    world.assert_no_processes_left(SETTLE);
    let left = workspaces();
    assert!(left.is_empty(), "workspaces left: {left:?}");
}

#[test]
fn seeds_with_links_or_outside_the_suite_are_refused() {
    let world = World::new();
    let seed = world.dir.path().join("seed");
    std::fs::create_dir_all(&seed).unwrap();
    std::fs::write(seed.join("data.txt"), "x").unwrap();
    std::os::unix::fs::symlink("/tmp", seed.join("escape")).unwrap();
    let suite = write_suite(
        &world,
        "links.toml",
        "[[case]]\nid = \"linked\"\nworkspace = \"seed\"\ncells = [{ language = \"py\", code = \"print(1)\" }]\nscorers = [{ kind = \"status\", expect = \"complete\" }]\n",
    );
    let run = world.run(&["check", path_str(&suite)]);
    assert_ne!(run.code, 0, "{}", run.stdout);
    let all = format!("{}{}", run.stdout, run.stderr);
    assert!(all.contains("escape is a symbolic link (to /tmp)"), "{all}");

    // A seed beside the suite's directory, not in it.
    let suites = world.dir.path().join("suites");
    std::fs::create_dir_all(&suites).unwrap();
    let outside = world.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "s").unwrap();
    let suite = suites.join("outside.toml");
    std::fs::write(
        &suite,
        "[[case]]\nid = \"out\"\nworkspace = \"../outside\"\ncells = [{ language = \"py\", code = \"print(open('secret.txt').read())\" }]\nscorers = [{ kind = \"output_contains\", text = \"s\" }]\n",
    )
    .unwrap();
    let run = world.run(&["check", path_str(&suite)]);
    run.assert_code(2);
    assert!(
        run.stderr.contains("outside the suite's directory")
            && run.stderr.contains("--allow-outside-seeds"),
        "{}",
        run.stderr
    );
    let run = world.run(&["check", "--allow-outside-seeds", path_str(&suite)]);
    run.assert_code(0);
    world.assert_no_processes_left(SETTLE);
}
