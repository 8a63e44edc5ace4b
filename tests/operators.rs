//! What operators set in the config file, end to end: OS limits, the RSS cap, environment
//! filtering, interpreter choice, prewarming and live reload.

mod common;

use common::{wait_until, World, SHORT_INTERVALS};
use serde_json::{json, Value};
use std::time::Duration;

const SETTLE: Duration = Duration::from_secs(5);

fn eval_json(world: &World, args: &[&str]) -> Value {
    let mut full = vec!["eval", "--no-daemon", "--json"];
    full.extend_from_slice(args);
    world.run(&full).json()
}

fn only_cell(result: &Value) -> &Value {
    &result["cells"][0]
}

#[test]
fn address_space_limit_turns_a_huge_allocation_into_memory_error() {
    let world = World::with_config(&format!(
        "{SHORT_INTERVALS}[limits]\naddress-space = \"256MiB\"\n"
    ));
    let result = world.run_cells(&json!([
        {"language": "py", "code": "kept = 1"},
        {"language": "py", "code": "try:\n    bytearray(1 << 30)\nexcept MemoryError:\n    print('MemoryError')"},
        {"language": "py", "code": "print(kept)"},
        {"language": "py", "code": "bytearray(1 << 30)"},
    ])).json();
    let cells = common::cells(&result);
    assert_eq!(cells[1]["output"], "MemoryError\n", "{result:#}");
    assert_eq!(cells[2]["output"], "1\n", "the session goes on");
    assert_eq!(cells[3]["status"], "error");
    assert!(cells[3]["output"]
        .as_str()
        .unwrap_or_default()
        .contains("MemoryError"));
    world.assert_no_processes_left(SETTLE);
}

#[test]
fn open_files_and_processes_limits_are_visible_inside_a_cell() {
    let world = World::with_config("[limits]\nopen-files = 256\nprocesses = 4000\n");
    let result = eval_json(
        &world,
        &["-l", "py", "import resource\nprint(resource.getrlimit(resource.RLIMIT_NOFILE), resource.getrlimit(resource.RLIMIT_NPROC))"],
    );
    assert_eq!(
        only_cell(&result)["output"],
        "(256, 256) (4000, 4000)\n",
        "{result:#}"
    );
}

#[test]
fn a_worker_over_max_rss_is_recycled_with_a_clear_message() {
    let world = World::with_config(&format!(
        "{SHORT_INTERVALS}[limits]\nmax-rss = \"100MiB\"\n"
    ));
    let result = world.run_cells(&json!([
        {"language": "py", "code": "import time\nhog = bytearray(300 * 1024 * 1024)\nfor i in range(len(hog) // 4096): hog[i * 4096] = 1\ntime.sleep(20)", "timeout": 30},
    ])).json();
    let cell = only_cell(&result);
    assert_eq!(cell["status"], "error", "{result:#}");
    let output = cell["output"].as_str().unwrap_or_default();
    assert!(output.contains("max-rss"), "{output}");
    assert!(
        output.contains("100 MiB") || output.contains("100.0 MiB"),
        "names the cap: {output}"
    );
    world.assert_no_processes_left(SETTLE);
}

#[test]
fn credentials_in_the_supervisor_environment_never_reach_a_cell() {
    let world = World::new();
    let file = world.cells_file(&json!([
        {"language": "py", "code": "import os\nprint(os.environ.get('OPENAI_API_KEY'), os.environ.get('HOME') is not None)"},
        {"language": "lua", "code": "print(os.getenv('OPENAI_API_KEY'), os.getenv('ANTHROPIC_API_KEY'))"},
        {"language": "js", "code": "String(await env('OPENAI_API_KEY')) + ' ' + (await env('HOME') !== undefined)"},
        {"language": "py", "code": "import os\nprint(os.environ.get('UNLISTED_VARIABLE'), os.environ['PYTHONUNBUFFERED'])"},
    ]));
    let run = world
        .command()
        .env("OPENAI_API_KEY", "sk-do-not-leak")
        .env("ANTHROPIC_API_KEY", "sk-ant-do-not-leak")
        .env("UNLISTED_VARIABLE", "x")
        .args([
            "eval",
            "--no-daemon",
            "--json",
            "--cells",
            common::path_str(&file),
        ])
        .output()
        .expect("run");
    let result: Value = serde_json::from_slice(&run.stdout).expect("json");
    let cells = common::cells(&result);
    assert_eq!(cells[0]["output"], "None True\n", "{result:#}");
    assert_eq!(cells[1]["output"], "nil\tnil\n", "{result:#}");
    assert_eq!(cells[2]["output"], "undefined true\n", "{result:#}");
    assert_eq!(cells[3]["output"], "None 1\n", "{result:#}");
}

#[test]
fn a_venv_in_the_cells_directory_is_the_interpreter() {
    let world = World::new();
    let project = world.work_dir().join("project");
    std::fs::create_dir_all(&project).expect("project dir");
    let made = std::process::Command::new("python3")
        .args(["-m", "venv", "--without-pip", ".venv"])
        .current_dir(&project)
        .status()
        .expect("python3 -m venv");
    assert!(made.success());
    let project_arg = project.to_string_lossy().into_owned();
    let result = eval_json(
        &world,
        &[
            "--cwd",
            &project_arg,
            "-l",
            "py",
            "import sys, os\nprint(sys.prefix == os.path.abspath('.venv'))",
        ],
    );
    assert_eq!(only_cell(&result)["output"], "True\n", "{result:#}");
}

/// The pids of Python workers (`... __worker py`) of this world.
fn python_workers(world: &World) -> Vec<u32> {
    world.processes_running("__worker\0py\0")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prewarm_hands_a_new_session_an_interpreter_started_before_it() {
    use cellvisor::{CellSpec, EvalRequest, Language};
    let world = World::new();
    let cv = world.supervisor(|config| config.python.prewarm = 1);
    let ready = wait_until(Duration::from_secs(15), || {
        let ready = common::block_on(cv.prewarmed()).unwrap_or(0);
        if ready == 1 {
            Ok(())
        } else {
            Err(ready)
        }
    });
    assert!(ready.is_ok(), "one prewarmed worker: {ready:?}");
    let warm = match python_workers(&world).as_slice() {
        [pid] => *pid,
        other => panic!("expected one python worker, found {other:?}"),
    };
    let request = EvalRequest {
        session: "fresh".into(),
        cwd: None,
        cells: vec![CellSpec::new(Language::Python, "print(1)")],
        tools: Vec::new(),
        ..Default::default()
    };
    let result = cv.eval(request, None).await.expect("eval");
    assert_eq!(result.cells[0].report.output, "1\n");
    let rows = cv.status().await.expect("status");
    assert_eq!(
        rows[0].pid,
        Some(warm),
        "the session got the prewarmed worker"
    );
    // And the pool is refilled.
    let refilled = wait_until(Duration::from_secs(15), || {
        let workers = python_workers(&world);
        if workers.len() == 2 {
            Ok(())
        } else {
            Err(workers)
        }
    });
    assert!(refilled.is_ok(), "{refilled:?}");
    cv.shutdown().await;
    world.assert_no_processes_left(SETTLE);
}

#[test]
fn sighup_applies_a_new_max_sessions_and_a_broken_file_keeps_the_old_one() {
    let world = World::new();
    // The daemon reads its own file; the CLI clients keep the (valid) world config.
    let daemon_config = world.dir.path().join("daemon.toml");
    std::fs::write(&daemon_config, "[sessions]\nmax-sessions = 1\n").expect("config");
    let socket = world.runtime_dir().join("cellvisor").join("hup.sock");
    let socket_arg = socket.to_string_lossy().into_owned();
    let mut daemon = world
        .command()
        .args(["serve", "--socket", &socket_arg, "--config"])
        .arg(&daemon_config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("serve");
    let up = wait_until(Duration::from_secs(15), || {
        std::os::unix::net::UnixStream::connect(&socket).map(|_| ())
    });
    assert!(up.is_ok());
    let live = |world: &World| -> usize {
        let run = world.run(&["--socket", &socket_arg, "status", "--json"]);
        serde_json::from_str::<Value>(&run.stdout)
            .ok()
            .and_then(|v| v["sessions"].as_array().map(Vec::len))
            .unwrap_or(0)
    };
    let eval = |session: &str| {
        world
            .run(&[
                "--socket",
                &socket_arg,
                "eval",
                "-s",
                session,
                "-l",
                "lua",
                "x = 1",
            ])
            .assert_code(0);
    };
    eval("a");
    eval("b");
    assert_eq!(live(&world), 1, "max-sessions = 1");

    std::fs::write(&daemon_config, "[sessions]\nmax-sessions = 2\n").expect("config");
    let hup = |pid: u32| {
        std::process::Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .expect("kill");
    };
    hup(daemon.id());
    let applied = wait_until(Duration::from_secs(10), || {
        eval("a");
        eval("b");
        if live(&world) == 2 {
            Ok(())
        } else {
            Err(())
        }
    });
    assert!(applied.is_ok(), "max-sessions = 2 took effect");

    std::fs::write(&daemon_config, "[sessions]\nmax-sessions = \"lots\"\n").expect("config");
    let refused = common::daemon::Client::connect(&socket)
        .call("config/reload", json!({}))
        .expect_err("a broken file is refused");
    assert!(
        refused["message"]
            .as_str()
            .unwrap_or_default()
            .contains("max-sessions"),
        "{refused}"
    );
    eval("c");
    assert_eq!(
        live(&world),
        2,
        "the old max-sessions (2) is kept, not the default (4)"
    );

    world.run(&["--socket", &socket_arg, "stop"]).assert_code(0);
    let _ = daemon.wait();
    world.assert_no_processes_left(SETTLE);
}

#[test]
fn engine_memory_limits_fail_the_cell_and_the_session_goes_on() {
    let world =
        World::with_config("[js]\nmemory-limit = \"32MiB\"\n[lua]\nmemory-limit = \"32MiB\"\n");
    let result = world
        .run_cells(&json!([
            {"language": "js", "code": "var kept = 1"},
            {"language": "js", "code": "let a = []; while (true) a.push(new Array(1e5).fill(1))"},
        ]))
        .json();
    let cells = common::cells(&result);
    assert_eq!(cells[1]["status"], "error", "{result:#}");
    assert!(
        cells[1]["output"]
            .as_str()
            .unwrap_or_default()
            .contains("out of memory"),
        "{result:#}"
    );

    let result = world.run_cells(&json!([
        {"language": "lua", "code": "kept = 1"},
        {"language": "lua", "code": "local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 100) .. i end"},
    ])).json();
    let cells = common::cells(&result);
    assert_eq!(cells[1]["status"], "error", "{result:#}");
    assert!(
        cells[1]["output"]
            .as_str()
            .unwrap_or_default()
            .contains("not enough memory"),
        "{result:#}"
    );

    // The same worker goes on after the failure: state from before is still there.
    let result = world.run_cells(&json!([
        {"language": "js", "code": "var kept = 1"},
        {"language": "js", "code": "try { let a = []; while (true) a.push(new Array(1e5).fill(1)) } catch (e) {}"},
        {"language": "js", "code": "kept + 1"},
    ])).json();
    let last = &common::cells(&result)[2];
    assert_eq!(last["output"], "2\n", "{result:#}");
    world.assert_no_processes_left(SETTLE);
}

/// Issue 42 item 7: a cell's deadline is visible in the daemon's log at its default level:
/// the timeout firing, the interrupt sent, and the grace running out (before the kill).
#[test]
fn a_cells_timeout_interrupt_and_grace_are_logged_by_the_daemon() {
    let world = World::with_config(SHORT_INTERVALS);
    let socket = world.runtime_dir().join("cellvisor").join("logged.sock");
    let log = world.dir.path().join("daemon.log");
    let mut daemon = world
        .command()
        .env_remove("CELLVISOR_LOG")
        .args(["serve", "--socket"])
        .arg(&socket)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("spawn serve");
    wait_until(Duration::from_secs(15), || {
        std::os::unix::net::UnixStream::connect(&socket).map(|_| ())
    })
    .expect("the daemon listens");
    let mut client = common::daemon::Client::connect(&socket);
    let result = client.eval(
        "deadline",
        json!([{"language": "py", "timeout": 1,
                "code": "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass"}]),
    );
    assert_eq!(result["cells"][0]["status"], "cancelled", "{result:#}");
    let lines = wait_until(Duration::from_secs(30), || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let wanted = [
            "cell timeout fired",
            "cell interrupt sent",
            "cell interrupt grace ran out",
        ];
        let found: Vec<String> = wanted
            .iter()
            .filter_map(|w| text.lines().find(|l| l.contains(w)).map(str::to_string))
            .collect();
        if found.len() == wanted.len() {
            Ok(found)
        } else {
            Err(text)
        }
    })
    .unwrap_or_else(|text| panic!("the deadline's lines are not all in the log:\n{text}"));
    assert!(
        lines[0].contains("INFO") && lines[0].contains("session=deadline"),
        "{lines:?}"
    );
    assert!(lines[0].contains("timeout_ms=1000"), "{lines:?}");
    assert!(
        lines[1].contains("INFO") && lines[1].contains("grace_ms=1000"),
        "{lines:?}"
    );
    assert!(
        lines[2].contains("WARN") && lines[2].contains("grace_ms=1000"),
        "{lines:?}"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM the daemon");
    let _ = daemon.wait();
    world.assert_no_processes_left(SETTLE);
}

/// Issue 42 item 4: the daemon, not the CLI, applies the operator's `[env]` rules to the
/// caller's variables. The daemon's config allows `MYAPP_*`; the CLI's config says nothing of
/// it, and the cell still sees the caller's `MYAPP_TOKEN_URL` (a place, not a credential),
/// while a credential the built-in denylist names stays with the caller.
#[test]
fn the_daemons_env_rules_apply_to_the_callers_variables() {
    let daemon = common::daemon::Daemon::start_with("[env]\nallow = [\"MYAPP_*\"]\n");
    let cli_config = daemon.world.dir.path().join("cli-config.toml");
    std::fs::write(&cli_config, "").expect("the CLI's config");
    let run = daemon
        .world
        .command()
        .env("CELLVISOR_CONFIG", &cli_config)
        .env("MYAPP_TOKEN_URL", "https://auth.example/token")
        .env("MYAPP_MODE", "fast")
        .env("MYAPP_TOKEN", "t-do-not-leak")
        .env("UNLISTED_VARIABLE", "x")
        .arg("--socket")
        .arg(&daemon.socket)
        .args([
            "eval",
            "-l",
            "py",
            "import os\nfor k in ['MYAPP_TOKEN_URL', 'MYAPP_MODE', 'MYAPP_TOKEN', 'UNLISTED_VARIABLE']:\n    print(k, os.environ.get(k))",
        ])
        .output()
        .expect("run cellvisor");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(
        stdout,
        "MYAPP_TOKEN_URL https://auth.example/token\nMYAPP_MODE fast\nMYAPP_TOKEN None\n\
         UNLISTED_VARIABLE None\n"
    );
    daemon.stop();
}
