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
        "files",
    ] {
        // A case that declares metrics scores their mean (cell-time among them).
        let score = summary["tag_scores"][language].as_f64().unwrap_or_default();
        assert!(score > 0.8 && score <= 1.0, "{language}: {score}");
    }
    // The timeout case passes every scorer; its second of cell time (declared over 0..2 s)
    // costs it score.
    let timeout = case(&summary, "timeout-cancels");
    assert_eq!(timeout["passed"], true);
    let timeout_score = timeout["score"].as_f64().unwrap_or(1.0);
    assert!(timeout_score > 0.7 && timeout_score < 0.95, "{timeout:#}");
    assert_eq!(summary["incomplete"], 0);
    let metric_ids: Vec<&str> = summary["metrics"]
        .as_array()
        .map(|m| m.iter().filter_map(|m| m["id"].as_str()).collect())
        .unwrap_or_default();
    for id in ["cell-time", "total-time", "output-bytes", "restarts"] {
        assert!(metric_ids.contains(&id), "{id}: {metric_ids:?}");
    }
    let cell_time = &summary["metrics"][0]["raw"];
    for stat in ["min", "mean", "p50", "p90", "max"] {
        assert!(cell_time[stat].is_f64(), "{stat}: {cell_time}");
    }

    // The anchor's layout: <root>/<suite>/<id>, with its EvalArtifacts files.
    let dir = out.join("python/helpers-read-and-write");
    let result = read_json(&dir.join("result.json"));
    assert_eq!(result["passed"], true);
    for (key, file) in [
        ("result", "result.json"),
        ("events", "events.jsonl"),
        ("transcript", "transcript.json"),
        ("workspace", "workspace.json"),
    ] {
        assert_eq!(result["artifacts"][key], path_str(&dir.join(file)), "{key}");
        assert!(dir.join(file).is_file(), "{file}");
    }
    let transcript = read_json(&dir.join("transcript.json"));
    let turns: Vec<(&str, &str)> = transcript
        .as_array()
        .expect("transcript turns")
        .iter()
        .map(|t| {
            (
                t["phase"].as_str().unwrap_or(""),
                t["status"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(turns.last(), Some(&("cells", "complete")), "{transcript:#}");
    assert!(transcript[0]["code"].is_string() && transcript[0]["output"].is_string());
    assert_eq!(
        read_json(&out.join("run-summary.json")),
        summary,
        "the anchor's run file"
    );
    // Every summary row, passing or not, has its scores, metrics and trajectory.
    let row = case(&summary, "helpers-read-and-write");
    assert!(
        row["scores"]
            .as_array()
            .is_some_and(|s| s.len() >= 2 && s.iter().all(|s| s["passed"] == true)),
        "{row:#}"
    );
    assert!(
        row["metrics"].as_array().is_some_and(|m| !m.is_empty()),
        "{row:#}"
    );
    assert!(row["trajectory"]["steps"].is_array(), "{row:#}");
    let line = row["trajectory_line"].as_str().unwrap_or_default();
    assert!(
        line.starts_with("cell:py") && line.contains(" → status:read"),
        "{line}"
    );
    // The anchor's aggregate: normalized statistics, direction and tags.
    let cell_time_total = &summary["metrics"][0];
    assert_eq!(cell_time_total["id"], "cell-time");
    assert!(
        cell_time_total["normalized"]["p90"].is_f64(),
        "{cell_time_total}"
    );
    assert_eq!(cell_time_total["direction"], "lower-is-better");
    assert!(cell_time_total["tags"].is_array());
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
    assert_eq!(total["declared"], true);
    assert_eq!(result["completed"], true);
    // Efficiency metrics are measured undeclared (cell-time is declared by the suite).
    let metric = |id: &str| {
        result["metrics"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["id"] == id))
            .cloned()
            .unwrap_or_else(|| panic!("metric {id} in {result:#}"))
    };
    // The suite declares metrics, so the efficiency metrics join its set (anchor 002:
    // "auto-merged with EFFICIENCY_METRICS") and count in the score; each record carries
    // the anchor's EvalMetric fields.
    for id in ["cell-time", "total-time", "output-bytes", "restarts"] {
        let m = metric(id);
        assert_eq!(m["declared"], true, "{id}");
        assert_eq!(
            (&m["missing"], &m["direction"]),
            (&Value::Bool(false), &"lower-is-better".into()),
            "{m}"
        );
        assert!(
            m["min"].is_number() && m["max"].is_number() && m["normalized"].is_number(),
            "{m}"
        );
        assert!(
            m["tags"]
                .as_array()
                .is_some_and(|t| t.contains(&"@efficiency".into())),
            "{m}"
        );
    }
    assert!(metric("total-time")["description"].is_string());
    assert!(metric("output-bytes")["raw"].as_f64() > Some(0.0));
    assert_eq!(metric("restarts")["raw"], 0.0);
    assert!(metric("total-time")["raw"].as_f64() >= result["cells"][0]["duration_ms"].as_f64());
    // The trajectory: the cells in order, each with its duration, and the helper calls.
    let steps = result["trajectory"]["steps"]
        .as_array()
        .expect("trajectory steps");
    let kinds: Vec<(&str, &str)> = steps
        .iter()
        .map(|s| {
            (
                s["kind"].as_str().unwrap_or(""),
                s["name"].as_str().unwrap_or(""),
            )
        })
        .collect();
    let cell_steps: Vec<&Value> = steps.iter().filter(|s| s["kind"] == "cell").collect();
    assert_eq!(cell_steps.len(), 2, "{kinds:?}");
    assert_eq!(cell_steps[0]["title"], "total");
    assert_eq!(cell_steps[1]["title"], "sort");
    assert_eq!(
        cell_steps[0]["duration_ms"],
        result["cells"][0]["duration_ms"]
    );
    assert_eq!(cell_steps[0]["status"], "complete");
    let read_at = kinds.iter().position(|k| *k == ("status", "read"));
    let write_at = kinds.iter().position(|k| *k == ("status", "write"));
    assert!(read_at.is_some() && read_at < write_at, "{kinds:?}");
    assert!(result["trajectory"]["total_blocks"].as_u64() >= Some(5));

    // The files suite: the new file scorers and a judge, all passing.
    let files = read_json(&out.join("files/report-files/result.json"));
    assert_eq!(files["passed"], true, "{files:#}");
    let judge = files["scores"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == "llm.judge"))
        .expect("the judge's verdict");
    assert_eq!(judge["details"], "found 2 of 2 phrases");
    let judged = files["metrics"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["id"] == "judged"))
        .expect("the judge's metric");
    assert_eq!(
        (&judged["raw"], &judged["missing"]),
        (&1.0.into(), &Value::Bool(false))
    );
    let quality = files["scores"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == "notes hold the total"))
        .expect("file_content_quality");
    assert_eq!(
        (quality["score"].as_f64(), &quality["passed"]),
        (Some(0.75), &Value::Bool(true))
    );

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

    let setup_phase =
        std::fs::read_to_string(out.join("lua/state-persists/events.jsonl")).expect("lua events");
    assert!(setup_phase.contains("\"phase\":\"setup\""), "{setup_phase}");
    assert!(setup_phase.contains("\"phase\":\"cells\""), "{setup_phase}");
    world.assert_no_processes_left(SETTLE);
}

#[test]
fn low_scores_are_reported_and_fail_the_run_only_under_fail_under() {
    let world = World::new();
    let broken = examples("broken/deliberately-broken.toml");
    let run = world.run(&["check", path_str(&broken)]);
    run.assert_code(0);
    let row = table_line(&run.stdout, |l| l.contains("broken/wrong-answer"));
    assert!(row.starts_with("FAIL"), "{row}");
    assert!(row.ends_with("output.contains:43"), "{row}");
    for reason in [
        "output.contains:43: output was \"42\\n\"",
        "file.quality:answer.txt: expected \"42\\n\": answer.txt holds it only with the surrounding whitespace",
        "file.existsOneOf:report.md|REPORT.md: none of report.md, REPORT.md is in the workspace",
        "file.contains:notes.txt: notes.txt holds \"x\"",
        "file.contains:hostname.txt: hostname.txt is a symbolic link; links are not followed",
        "llm.judge: judge failed: printed no {\"score\": 0..1, \"reason\": \"...\"} object: \"looks good to me\"",
        "llm.judge: judge failed: exited with exit status: 2: \"no API key set\"",
        "llm.judge: judge failed: timed out after 1s; its process group was killed",
    ] {
        assert!(run.stdout.contains(reason), "{reason}: {}", run.stdout);
    }
    let quality = table_line(&run.stdout, |l| {
        l.contains("broken/quality-only-with-whitespace")
    });
    assert!(quality.contains(" 0.50 "), "{quality}");
    // Every scorer passes, but the declared metric (0.3 s over a 0..100 ms range) scores 0,
    // and the score is the metrics' mean alone (the efficiency metrics merged in).
    let slow = table_line(&run.stdout, |l| l.contains("broken/slow-by-its-metric"));
    let slow_score: f64 = slow
        .split_whitespace()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    assert!(
        slow.starts_with("pass") && slow_score < 0.8 && slow_score > 0.5,
        "{slow}"
    );

    let run = world.run(&["check", path_str(&broken), "--fail-under", "0.9", "--json"]);
    run.assert_code(3);
    assert!(
        run.stderr
            .contains("below --fail-under 0.9: 8 case runs: broken/judge-fails (0.00)"),
        "{}",
        run.stderr
    );
    assert_eq!(run.json()["incomplete"], 0);
    let run = world.run(&["check", path_str(&broken), "--fail-under", "0"]);
    run.assert_code(0);
    for bad in ["1.5", "-1", "most"] {
        let flag = format!("--fail-under={bad}");
        let run = world.run(&["check", path_str(&broken), &flag]);
        run.assert_code(2);
        assert!(
            run.stderr.contains("give a score from 0 to 1"),
            "{bad}: {}",
            run.stderr
        );
    }
    world.assert_no_processes_left(SETTLE);
}

#[test]
fn a_case_whose_cells_raised_or_timed_out_unexpectedly_fails_the_run() {
    let world = World::new();
    let suite = examples("broken/did-not-complete.toml");
    let run = world.run(&["check", path_str(&suite), "--fail-under", "0"]);
    run.assert_code(1);
    for id in ["raises-after-the-answer", "times-out-after-the-answer"] {
        let row = table_line(&run.stdout, |l| l.contains(id));
        assert!(
            row.starts_with("FAIL") && row.ends_with("status.completed"),
            "{row}"
        );
        assert!(
            row.contains(" 0.50 "),
            "the output scorer passed, the status did not: {row}"
        );
    }
    assert!(
        run.stdout.contains(
            "status.completed: cell 0 (py) ended error: \"ZeroDivisionError: division by zero\"; \
             a case that expects it declares { kind = \"status\", expect = \"error\" }"
        ),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("cell 0 (lua) ended cancelled"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("6 failed (0.0%), 6 did not complete")
            && run.stdout.contains("\n    trajectory: cell:py error "),
        "{}",
        run.stdout
    );
    let run = world.run(&["check", path_str(&suite), "--json"]);
    run.assert_code(1);
    let summary = run.json();
    let raised = case(&summary, "raises-after-the-answer");
    assert_eq!(
        (&raised["passed"], &raised["completed"]),
        (&Value::Bool(false), &Value::Bool(false))
    );
    // Anchor 002: "A run that did not complete resolves with `passed` set to `false`", and
    // "on expiry the run is aborted and `status` becomes 'timeout'".
    for (id, status, scorer, says) in [
        (
            "goes-to-the-background",
            "running",
            "status.completed",
            "went to the background",
        ),
        (
            "runs-past-its-timeout",
            "timeout",
            "status.completed",
            "ran past its timeout_ms of 500 ms",
        ),
        (
            "metric-not-finite",
            "complete",
            "metrics",
            "metric ratio yielded inf: a metric's raw value must be a finite number",
        ),
    ] {
        let row = case(&summary, id);
        assert_eq!(
            (&row["passed"], &row["completed"], &row["status"]),
            (
                &Value::Bool(false),
                &Value::Bool(false),
                &Value::from(status)
            ),
            "{row:#}"
        );
        let failed: Vec<&Value> = row["failures"].as_array().into_iter().flatten().collect();
        assert!(
            failed
                .iter()
                .any(|f| f["name"] == scorer
                    && f["details"].as_str().is_some_and(|d| d.contains(says))),
            "{id}: {row:#}"
        );
    }
    // Not scored on its partial output: the output scorer that would pass was not run.
    let background = case(&summary, "goes-to-the-background");
    assert_eq!(strings(&background["failed_scorers"]), ["status.completed"]);
    assert_eq!(
        background["scores"].as_array().map(Vec::len),
        Some(1),
        "{background:#}"
    );
    world.assert_no_processes_left(SETTLE);
}

const JUDGED: &str = r#"
[[case]]
id = "judged"
cells = [{ language = "py", code = "write('made.txt', 'x')\nprint('made it')" }]
scorers = [
  { kind = "judge", rubric = "says it made it", command = ["python3", "-c", """
import json, os, sys
case = json.load(sys.stdin)
out = case["cells"][0]["output"].strip()
files = ",".join(f["path"] for f in case["workspace"]["files"])
print(json.dumps({"score": 0.7, "reason": " | ".join([case["id"], case["rubric"], out, files, ",".join(sorted(os.listdir(".")))])}))
"""] },
  { kind = "judge", name = "strict", threshold = 0.9, command = ["sh", "-c", "echo '{\"score\": 0.7}'"] },
  { kind = "judge", name = "leaves a child", timeout = 1, command = ["sh", "-c", "sleep 300 & sleep 300"] },
]
"#;

/// A judge that grades 0.65 (passing at the old 0.5, failing at the anchor's 0.7) and emits
/// its grade into a declared metric; one that breaks leaves its metric missing.
const JUDGED_METRICS: &str = r#"
[[case]]
id = "graded"
cells = [{ language = "py", code = "print('made it')" }]
scorers = [
  { kind = "output_contains", text = "nowhere to be seen" },
  { kind = "judge", metric = "quality", command = ["sh", "-c", "cat >/dev/null; echo '{\"score\": 0.65}'"] },
  { kind = "judge", name = "broken", metric = "second-opinion", command = ["sh", "-c", "exit 3"] },
]
[case.metrics.quality]
min = 0
max = 1
direction = "higher"
description = "the judge's grade"
tags = ["@quality"]
[case.metrics.second-opinion]
min = 0
max = 1
direction = "higher"

[[case]]
id = "no-metrics"
cells = [{ language = "lua", code = "print(1)" }]
scorers = [{ kind = "output_contains", text = "1" }, { kind = "output_contains", text = "2" }]
"#;

#[test]
fn a_judge_passes_at_0_7_emits_its_metric_and_the_score_is_the_metrics_mean() {
    let world = World::new();
    let suite = write_suite(&world, "judged-metrics.toml", JUDGED_METRICS);
    let run = world.run(&["check", path_str(&suite), "--json"]);
    run.assert_code(0);
    let summary = run.json();
    let graded = case(&summary, "graded");
    let judge = graded["scores"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == "llm.judge"))
        .expect("the judge's verdict");
    assert_eq!(
        (&judge["score"], &judge["passed"]),
        (&0.65.into(), &Value::Bool(false)),
        "{judge}"
    );
    let metrics = graded["metrics"].as_array().expect("metrics");
    let metric = |id: &str| {
        metrics
            .iter()
            .find(|m| m["id"] == id)
            .unwrap_or_else(|| panic!("{id} in {graded:#}"))
    };
    let quality = metric("quality");
    assert_eq!(
        (&quality["raw"], &quality["normalized"]),
        (&0.65.into(), &0.65.into())
    );
    assert_eq!(quality["description"], "the judge's grade");
    assert_eq!(
        (&quality["min"], &quality["max"]),
        (&0.0.into(), &1.0.into())
    );
    assert_eq!(quality["direction"], "higher-is-better");
    assert_eq!(quality["missing"], false);
    let second = metric("second-opinion");
    assert_eq!(
        (&second["missing"], &second["raw"], &second["normalized"]),
        (&Value::Bool(true), &0.0.into(), &0.0.into())
    );
    // The score: the declared metrics' mean alone (efficiency metrics merged in), not the
    // scorers' (all of which failed).
    let normalized: Vec<f64> = metrics
        .iter()
        .filter(|m| m["declared"] == true)
        .filter_map(|m| m["normalized"].as_f64())
        .collect();
    assert_eq!(normalized.len(), 6, "{graded:#}");
    let mean = normalized.iter().sum::<f64>() / normalized.len() as f64;
    let score = graded["score"].as_f64().unwrap_or(-1.0);
    assert!(
        (score - mean).abs() < 1e-9 && score > 0.4,
        "{score} vs {mean}"
    );
    assert_eq!(graded["tag_scores"]["@quality"], 0.65);
    // Without declared metrics: the scorers' mean.
    let plain = case(&summary, "no-metrics");
    assert_eq!(plain["score"], 0.5, "{plain:#}");
    // The summary's aggregate counts the missing run apart.
    let aggregate = summary["metrics"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["id"] == "second-opinion"))
        .expect("aggregate");
    assert_eq!(
        (&aggregate["count"], &aggregate["missing"]),
        (&0.into(), &1.into())
    );
    world.assert_no_processes_left(SETTLE);
}

#[test]
fn a_judge_reads_the_case_in_its_workspace_and_leaves_no_process() {
    let world = World::new();
    let suite = write_suite(&world, "judged.toml", JUDGED);
    let run = world.run(&["check", path_str(&suite), "--json"]);
    run.assert_code(0);
    let summary = run.json();
    let judged = case(&summary, "judged");
    assert_eq!(
        strings(&judged["failed_scorers"]),
        ["strict", "leaves a child"],
        "{judged:#}"
    );
    let run = world.run(&[
        "check",
        path_str(&suite),
        "--out",
        path_str(&world.dir.path().join("out")),
    ]);
    run.assert_code(0);
    let result = read_json(&world.dir.path().join("out/judged/judged/result.json"));
    let first = &result["scores"][0];
    assert_eq!(first["name"], "llm.judge", "the anchor's default name");
    assert_eq!(first["passed"], true);
    assert_eq!(first["score"], 0.7);
    assert_eq!(
        first["details"],
        "judged | says it made it | made it | made.txt | made.txt"
    );
    assert_eq!(result["scores"][1]["score"], 0.7);
    assert_eq!(result["scores"][1]["passed"], false);
    assert!(
        result["scores"][2]["details"]
            .as_str()
            .is_some_and(|d| d.contains("timed out after 1s")),
        "{result:#}"
    );
    // The timed-out judge's own child went with its process group.
    world.assert_no_processes_left(SETTLE);
}

#[test]
fn file_scorer_paths_stay_in_the_workspace() {
    let world = World::new();
    let scorer_case = |scorer: &str| {
        format!(
            "[[case]]\nid = \"sneaky\"\ncells = [{{ language = \"lua\", code = \"print(1)\" }}]\nscorers = [{scorer}]\n"
        )
    };
    for (scorer, message) in [
        (
            r#"{ kind = "file_exists", path = "/etc/passwd" }"#,
            r#"case "sneaky": scorer file.exists:/etc/passwd: path "/etc/passwd" must be relative and stay in the case's workspace"#,
        ),
        (
            r#"{ kind = "file_contains", path = "a/../../secret.txt", text = "s" }"#,
            r#"scorer file.contains:a/../../secret.txt: path "a/../../secret.txt" must be relative"#,
        ),
        (
            r#"{ kind = "file_content_quality", path = "../x", expected = "s" }"#,
            "scorer file.quality:../x: path",
        ),
        (
            r#"{ kind = "file_exists_one_of", paths = ["ok.txt", "/tmp/x"] }"#,
            r#"path "/tmp/x" must be relative"#,
        ),
        (
            r#"{ kind = "file_contains", path = "out.txt", pattern = "total = (" }"#,
            r#"case "sneaky": scorer file.contains:out.txt: invalid pattern "total = (""#,
        ),
        (
            r#"{ kind = "judge", command = [] }"#,
            "a judge needs `command",
        ),
    ] {
        let suite = write_suite(&world, "sneaky.toml", &scorer_case(scorer));
        let run = world.run(&["check", path_str(&suite)]);
        run.assert_code(2);
        assert!(run.stderr.contains(message), "{scorer}: {}", run.stderr);
    }

    // Links a cell makes to outside files and directories are listed, never followed, also
    // when `capture` names them.
    let outside = world.dir.path().join("outside");
    std::fs::create_dir_all(&outside).expect("outside");
    std::fs::write(outside.join("secret.txt"), "top secret").expect("secret");
    let suite = write_suite(
        &world,
        "links.toml",
        &format!(
            r#"
[[case]]
id = "links-out"
capture = ["door", "leak.txt", "door/secret.txt"]
cells = [{{ language = "py", code = "import os\nos.symlink('{dir}', 'door')\nos.symlink('{file}', 'leak.txt')" }}]
scorers = [
  {{ kind = "file_contains", path = "leak.txt", text = "secret" }},
  {{ kind = "file_content_quality", path = "leak.txt", expected = "top secret" }},
  {{ kind = "file_exists", path = "door/secret.txt" }},
]
"#,
            dir = path_str(&outside),
            file = path_str(&outside.join("secret.txt")),
        ),
    );
    let out = world.dir.path().join("out");
    let run = world.run(&["check", path_str(&suite), "--out", path_str(&out)]);
    run.assert_code(0);
    assert!(
        run.stdout
            .contains("leak.txt is a symbolic link; links are not followed"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("door/secret.txt is not in the workspace"),
        "{}",
        run.stdout
    );
    let workspace = std::fs::read_to_string(out.join("links/links-out/workspace.json"))
        .expect("workspace.json");
    assert!(!workspace.contains("top secret"), "{workspace}");
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
            "status.error",
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
    // A failed scorer is a low score, reported: the case ran as written.
    run.assert_code(0);
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
    run.assert_code(0);
    let header = table_line(&run.stdout, |l| l.starts_with("case "));
    assert!(
        header.contains("wide") && header.contains("narrow"),
        "{header}"
    );
    assert!(header.ends_with("diff (narrow - wide)"), "{header}");
    let row = table_line(&run.stdout, |l| {
        l.starts_with("output-cap/line-100-visible")
    });
    // The score is the declared metrics' mean (kept-bytes, 1800 bytes over 0..4096, lower
    // is better: 0.56; scorers_passed: 1 under wide, 0.5 under narrow) with the efficiency
    // metrics merged in, two of which are times: so each variant's score is checked against
    // its own recorded metrics, and the difference against what the failed scorer costs
    // (0.5 / 6) plus what the two runs' times differ by, whatever the machine's speed.
    let recorded = |variant: &str| {
        read_json(&out.join(format!("{variant}/output-cap/line-100-visible/result.json")))
    };
    let normalized = |result: &Value, id: &str| {
        result["metrics"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["id"] == id))
            .and_then(|m| m["normalized"].as_f64())
            .unwrap_or_else(|| panic!("metric {id} in {result:#}"))
    };
    let score_of = |result: &Value| {
        let metrics = result["metrics"].as_array().expect("metrics");
        let sum: f64 = metrics
            .iter()
            .filter_map(|m| m["normalized"].as_f64())
            .sum();
        sum / metrics.len() as f64
    };
    let (wide, narrow) = (recorded("wide"), recorded("narrow"));
    assert_eq!(normalized(&wide, "scorers"), 1.0, "{wide:#}");
    assert_eq!(normalized(&narrow, "scorers"), 0.5, "{narrow:#}");
    for (label, result) in [("pass", &wide), ("FAIL", &narrow)] {
        let shown = format!("{label} {:.2}", score_of(result));
        assert!(row.contains(&shown), "{shown} in {row}");
    }
    let timing =
        |result: &Value| normalized(result, "cell-time") + normalized(result, "total-time");
    let expected = (-0.5 + timing(&narrow) - timing(&wide)) / 6.0;
    let difference: f64 = row
        .rsplit(' ')
        .next()
        .and_then(|d| d.parse().ok())
        .unwrap_or(0.0);
    assert!(
        (difference - expected).abs() <= 0.011,
        "{row}: expected {expected:.3}"
    );

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
        let quick_done = out.join("slow/a-quick/result.json").exists();
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

/// A notebook (nbformat 4) of `cells`, each `(source, outputs)`, in `language`.
fn notebook(language: &str, cells: &[(&str, Value)]) -> String {
    let cells: Vec<Value> = cells
        .iter()
        .enumerate()
        .map(|(n, (source, outputs))| {
            serde_json::json!({"cell_type": "code", "execution_count": n + 1, "metadata": {},
                               "source": source, "outputs": outputs})
        })
        .collect();
    serde_json::json!({"nbformat": 4, "nbformat_minor": 5, "cells": cells,
                       "metadata": {"language_info": {"name": language}}})
    .to_string()
}

fn stdout_output(text: &str) -> Value {
    serde_json::json!([{"output_type": "stream", "name": "stdout", "text": text}])
}

fn notebook_row<'a>(summary: &'a Value, suite: &str) -> &'a Value {
    summary["notebooks"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["suite"] == suite))
        .unwrap_or_else(|| panic!("no notebook {suite} in {summary:#}"))
}

#[test]
fn notebooks_replay_cell_by_cell_against_their_stored_outputs() {
    let world = World::new();
    let out = world.dir.path().join("out");
    let tour = examples("notebooks/tour.ipynb");
    let drifted = examples("broken/drifted.ipynb");
    let run = world.run(&[
        "check",
        path_str(&tour),
        path_str(&drifted),
        "--out",
        path_str(&out),
    ]);
    // Mismatches are low scores, not cells that could not run.
    run.assert_code(0);
    let line = table_line(&run.stdout, |l| l.contains("notebooks/tour.ipynb"));
    assert!(line.contains(" 10 ") && line.contains("100.0%"), "{line}");
    let line = table_line(&run.stdout, |l| {
        l.contains("broken/drifted.ipynb") && l.contains('%')
    });
    assert!(line.contains("40.0%"), "{line}");
    assert!(
        run.stdout.contains(
            "    cell 1 (In [1]): stdout differ\n      stdout:\n      - total: 5\n      + total: 4\n"
        ),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("    cell 3 (In [3]): result differ\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("      - [image/png, text/plain]\n      + [text/plain]\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("2 notebook runs: 12 of 15 cells match (80.0%)"),
        "{}",
        run.stdout
    );
    // One row per notebook, not per cell.
    assert!(!run.stdout.contains("tour/cell-"), "{}", run.stdout);

    let summary = read_json(&out.join("summary.json"));
    let tour_row = notebook_row(&summary, "tour");
    assert_eq!(tour_row["code_cells"], 10);
    assert_eq!(tour_row["matching"], 10);
    assert_eq!(tour_row["match_rate"], 1.0);
    let drifted_row = notebook_row(&summary, "drifted");
    assert_eq!(drifted_row["match_rate"], 0.4);
    let ids: Vec<&str> = drifted_row["mismatches"]
        .as_array()
        .map(|m| m.iter().filter_map(|m| m["id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ids, ["cell-001", "cell-003", "cell-005"]);
    assert_eq!(summary["incomplete"], 0);
    // The expected KeyError is a match, and the cell after it still sees the state.
    let error_cell = read_json(&out.join("tour/cell-006/result.json"));
    assert_eq!(error_cell["status"], "error");
    assert_eq!(error_cell["passed"], true);
    assert_eq!(
        error_cell["case"]["notebook"]["expected"]["error"],
        "KeyError"
    );
    let after = read_json(&out.join("tour/cell-007/result.json"));
    assert_eq!(after["passed"], true, "{after:#}");

    // --fail-under judges a notebook by its match rate.
    let run = world.run(&[
        "check",
        path_str(&tour),
        path_str(&drifted),
        "--fail-under",
        "0.5",
    ]);
    run.assert_code(3);
    assert!(
        run.stderr.contains("1 case run: notebook ") && run.stderr.contains("drifted.ipynb (0.40)"),
        "{}",
        run.stderr
    );
    let run = world.run(&[
        "check",
        path_str(&tour),
        path_str(&drifted),
        "--fail-under",
        "0.4",
    ]);
    run.assert_code(0);
    world.assert_no_processes_left(SETTLE);
}

#[test]
fn a_directory_of_notebooks_runs_each_in_its_own_seeded_workspace() {
    let world = World::new();
    let dir = world.dir.path().join("notebooks");
    let other = dir.join("other");
    std::fs::create_dir_all(&other).expect("dirs");
    std::fs::write(dir.join("data.txt"), "from beside the notebook\n").expect("data");
    let reads = notebook(
        "python",
        &[
            (
                "print(open('data.txt').read(), end='')",
                stdout_output("from beside the notebook\n"),
            ),
            (
                "open('made.txt', 'w').write('x')\nimport os\nos.path.exists('made.txt')",
                serde_json::json!([{"output_type": "execute_result", "execution_count": 2,
                                 "metadata": {}, "data": {"text/plain": "True"}}]),
            ),
        ],
    );
    std::fs::write(dir.join("reads.ipynb"), &reads).expect("notebook");
    // Same file name in another directory: it goes by its path.
    let counts = notebook(
        "python",
        &[
            ("n = 1", serde_json::json!([])),
            ("n += 1\nprint(n)", stdout_output("2\n")),
        ],
    );
    std::fs::write(other.join("reads.ipynb"), &counts).expect("notebook");
    let js = notebook(
        "javascript",
        &[("console.log(6 * 7)", stdout_output("42\n"))],
    );
    std::fs::write(dir.join("script.ipynb"), &js).expect("notebook");

    let run = world.run(&[
        "check",
        path_str(&dir),
        path_str(&other.join("reads.ipynb")),
        "--json",
    ]);
    run.assert_code(0);
    let summary: Value = serde_json::from_str(&run.stdout).expect("json summary");
    let rows = summary["notebooks"].as_array().expect("rows");
    assert_eq!(rows.len(), 3, "{summary:#}");
    for row in rows {
        assert_eq!(row["match_rate"], 1.0, "{row:#}");
    }
    notebook_row(&summary, "script");
    notebook_row(&summary, "reads");
    notebook_row(&summary, path_str(&other.join("reads.ipynb")));
    assert!(
        !dir.join("made.txt").exists(),
        "cells write in a copy, not beside the notebook"
    );
    world.assert_no_processes_left(SETTLE);
}

#[test]
fn notebooks_in_other_languages_or_malformed_are_refused_with_exit_2() {
    let world = World::new();
    let r = write_suite(
        &world,
        "stats.ipynb",
        &notebook("R", &[("1", serde_json::json!([]))]),
    );
    let run = world.run(&["check", path_str(&r)]);
    run.assert_code(2);
    assert!(
        run.stderr.contains("kernel language is \"R\"")
            && run.stderr.contains("python, javascript (as js) and lua"),
        "{}",
        run.stderr
    );
    let bad = write_suite(
        &world,
        "bad.ipynb",
        r#"{"nbformat": 4, "cells": [{"cell_type": "code", "source": "1",
            "outputs": [{"output_type": "stream", "name": "stdout", "text": 7}]}]}"#,
    );
    let run = world.run(&["check", path_str(&bad)]);
    run.assert_code(2);
    assert!(
        run.stderr
            .contains("cell 0 (counted from 0): output 0: `text` must be a string"),
        "{}",
        run.stderr
    );
    assert!(world.processes().is_empty());
}

/// Anchor 002's workspace options: `seedTarget` (where in the workspace the seed goes) and
/// `retain` (the workspace is kept on disk; its path is the snapshot's `cwd`).
#[test]
fn workspace_seed_target_and_retain() {
    let world = World::new();
    let seed = world.dir.path().join("seed");
    std::fs::create_dir_all(&seed).expect("seed dir");
    std::fs::write(seed.join("input.txt"), "seeded\n").expect("seed file");
    let suite = write_suite(
        &world,
        "workspace.toml",
        r#"
[[case]]
id = "kept"
workspace = { seedDir = "seed", seedTarget = "data/in", retain = true }
cells = [{ language = "py", code = "print(open('data/in/input.txt').read().strip())\nwrite('made.txt', 'x')" }]
scorers = [{ kind = "output_equals", text = "seeded" }, { kind = "file_exists", path = "data/in/input.txt" }]

[[case]]
id = "removed"
workspace = { seed_dir = "seed" }
cells = [{ language = "py", code = "print(open('input.txt').read().strip())" }]
scorers = [{ kind = "output_equals", text = "seeded" }]
"#,
    );
    let out = world.dir.path().join("out");
    let run = world.run(&["check", path_str(&suite), "--out", path_str(&out)]);
    run.assert_code(0);
    let kept = read_json(&out.join("workspace/kept/workspace.json"));
    let cwd = PathBuf::from(kept["cwd"].as_str().expect("cwd"));
    assert!(cwd.join("data/in/input.txt").is_file(), "{kept:#}");
    assert!(
        cwd.join("made.txt").is_file(),
        "retained with what the cell wrote"
    );
    let removed = read_json(&out.join("workspace/removed/workspace.json"));
    let gone = PathBuf::from(removed["cwd"].as_str().expect("cwd"));
    assert!(
        !gone.as_os_str().is_empty() && !gone.exists(),
        "{removed:#}"
    );
    std::fs::remove_dir_all(&cwd).expect("remove the retained workspace");
    world.assert_no_processes_left(SETTLE);
}

/// Runs `cellvisor ARGS` with a terminal as its stdout (a pseudo-terminal, through python3's
/// `pty`), and `extra_env`; returns what it printed.
fn run_on_a_terminal(world: &World, args: &[&str], extra_env: &[(&str, &str)]) -> String {
    let template = world.command();
    let mut command = std::process::Command::new("python3");
    command.arg("-c").arg(
        "import os, pty, sys\n\
         pid, fd = pty.fork()\n\
         if pid == 0:\n    os.execv(sys.argv[1], sys.argv[1:])\n\
         out = b''\n\
         while True:\n    try:\n        data = os.read(fd, 65536)\n    except OSError:\n        break\n    if not data:\n        break\n    out += data\n\
         os.waitpid(pid, 0)\n\
         sys.stdout.buffer.write(out)\n",
    );
    command.arg(template.get_program()).args(args);
    for (key, value) in template.get_envs() {
        match value {
            Some(value) => command.env(key, value),
            None => command.env_remove(key),
        };
    }
    if let Some(dir) = template.get_current_dir() {
        command.current_dir(dir);
    }
    command.env_remove("NO_COLOR").env("TERM", "xterm");
    for (key, value) in extra_env {
        command.env(key, value);
    }
    let output = command.output().expect("python3 runs the pty");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The anchor's reporter is "TTY-aware auto color": colours on a terminal, none in a pipe or
/// under NO_COLOR; `--color always|never` decide.
#[test]
fn the_report_has_colours_on_a_terminal_only() {
    let world = World::new();
    let suite = write_suite(
        &world,
        "colours.toml",
        r#"
[[case]]
id = "green"
cells = [{ language = "lua", code = "print(1)" }]
scorers = [{ kind = "output_equals", text = "1" }]
[[case]]
id = "red"
cells = [{ language = "lua", code = "print(2)" }]
scorers = [{ kind = "output_equals", text = "1" }]
"#,
    );
    // The progress bar (stderr, on the same terminal) has escapes of its own: look for colours.
    let coloured = |text: &str| {
        ["\u{1b}[32m", "\u{1b}[31m", "\u{1b}[1m"]
            .iter()
            .any(|c| text.contains(c))
    };
    let tty = run_on_a_terminal(&world, &["check", path_str(&suite)], &[]);
    assert!(tty.contains("\u{1b}[32mpass\u{1b}[0m"), "{tty:?}");
    assert!(tty.contains("FAIL\u{1b}[0m"), "{tty:?}");
    let no_color = run_on_a_terminal(&world, &["check", path_str(&suite)], &[("NO_COLOR", "1")]);
    assert!(
        no_color.contains("colours/red") && !coloured(&no_color),
        "{no_color:?}"
    );
    let never = run_on_a_terminal(
        &world,
        &["check", path_str(&suite), "--color", "never"],
        &[],
    );
    assert!(
        never.contains("colours/red") && !coloured(&never),
        "{never:?}"
    );
    let piped = world.run(&["check", path_str(&suite)]);
    piped.assert_code(0);
    assert!(!coloured(&piped.stdout), "{}", piped.stdout);
    let forced = world.run(&["check", path_str(&suite), "--color", "always"]);
    assert!(
        forced.stdout.contains("\u{1b}[32mpass"),
        "{}",
        forced.stdout
    );
    let bad = world.run(&["check", path_str(&suite), "--color", "sometimes"]);
    bad.assert_code(2);
    world.assert_no_processes_left(SETTLE);
}

/// Anchor 002's `artifactPath`: `<root>/<suite>/<id>` with unsafe characters replaced. A name
/// that had to change also keeps cellvisor's hashed directory (two names never share it).
#[test]
fn an_unsafe_name_is_written_at_the_anchors_path_and_its_escaped_one() {
    let world = World::new();
    let suite = write_suite(
        &world,
        "names.toml",
        r#"
suite = "my suite"
[[case]]
id = "py plots"
cells = [{ language = "lua", code = "print(1)" }]
scorers = [{ kind = "output_equals", text = "1" }]
"#,
    );
    let out = world.dir.path().join("out");
    world
        .run(&["check", path_str(&suite), "--out", path_str(&out)])
        .assert_code(0);
    let anchor = out.join("my_suite/py_plots");
    for file in [
        "result.json",
        "events.jsonl",
        "transcript.json",
        "workspace.json",
    ] {
        assert!(anchor.join(file).is_file(), "{file} at the anchor's path");
    }
    let result = read_json(&anchor.join("result.json"));
    let escaped = PathBuf::from(result["artifact_dir"].as_str().expect("artifact_dir"));
    assert_ne!(escaped, anchor);
    assert!(escaped.join("result.json").is_file(), "{escaped:?}");
    assert_eq!(escaped, out.join("my%20suite/py%20plots"), "{escaped:?}");
    world.assert_no_processes_left(SETTLE);
}
