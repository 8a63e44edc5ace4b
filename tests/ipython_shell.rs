//! IPython's own shell for Python cells (issue 42), end to end through the daemon: with
//! IPython installed (the test venv) a session's cells run in a real InteractiveShell, with
//! cellvisor's display, stdin refusal, interrupts and helpers around it, and the notebook
//! features IPython itself has come out as in Jupyter; without IPython (a bare venv) the
//! built-in emulation runs; `status` says which one each session runs, and the first cell's
//! notice why, when it is not the one asked for.

mod common;

use common::daemon::{cell, output, Client, Daemon};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// A virtualenv without any package (so without IPython), in `dir`.
fn bare_venv(dir: &Path) -> PathBuf {
    let venv = dir.join("bare");
    let made = std::process::Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .expect("run python3 -m venv");
    assert!(made.success(), "python3 -m venv failed");
    venv.join("bin/python")
}

/// A daemon whose Python is `python`, with more `[python]` keys.
fn daemon_on(python: &Path, keys: &str) -> Daemon {
    Daemon::start_with(&format!(
        "[python]\ninterpreter = {:?}\n{keys}",
        python.display().to_string()
    ))
}

/// The test venv's python, with IPython and `more` packages.
fn ipython_venv(more: &[&str]) -> PathBuf {
    let mut packages = vec!["IPython"];
    packages.extend_from_slice(more);
    common::test_venv(&packages).join("bin/python")
}

/// One `eval` of `codes` in `session`, run in `cwd`; the whole result.
fn run(client: &mut Client, session: &str, cwd: &Path, codes: &[&str]) -> Value {
    let cells: Vec<Value> = codes
        .iter()
        .map(|code| json!({"language": "py", "code": code}))
        .collect();
    client.eval_in(session, cwd, Value::Array(cells))
}

/// Cell `index`'s output and error text.
fn shown(result: &Value, index: usize) -> String {
    let error = cell(result, index)["error"].as_str().unwrap_or_default();
    format!("{}{error}", output(result, index))
}

/// Cell `index`'s displays.
fn displays(result: &Value, index: usize) -> Vec<Value> {
    cell(result, index)["displays"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Waits until the daemon's zygote is ready, so the next new session is forked from it.
fn wait_for_zygote(client: &mut Client) {
    let ready = common::wait_until(std::time::Duration::from_secs(60), || {
        let rows = client.call("zygotes", json!({})).expect("zygotes answers");
        let ready = rows
            .as_array()
            .is_some_and(|rows| rows.iter().any(|row| row["state"] == "ready"));
        if ready {
            Ok(())
        } else {
            Err(rows)
        }
    });
    if let Err(rows) = ready {
        panic!("no zygote became ready: {rows}");
    }
}

fn engine(client: &mut Client, session: &str) -> String {
    let rows = client.call("status", json!({})).expect("status");
    rows.as_array()
        .into_iter()
        .flatten()
        .find(|row| row["session"] == session && row["language"] == "py")
        .and_then(|row| row["engine"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// Anchor 000 ("Python cells run inside IPython/Jupyter"; stdin requests rejected with
/// `Kernel requested stdin; interactive input is not supported.`): with IPython installed
/// the cells run in IPython's InteractiveShell, which `get_ipython()` and `from IPython
/// import get_ipython` both are, with the attributes IPython's code uses; the session says
/// so in `status`.
#[test]
fn cells_run_in_ipython_s_own_shell_where_the_interpreter_has_it() {
    let python = ipython_venv(&[]);
    // No prewarmed worker (one started before the zygote was ready would not be forked).
    let daemon = daemon_on(&python, "prewarm = 0\n");
    let mut client = daemon.client();
    wait_for_zygote(&mut client);
    let dir = tempfile::tempdir().expect("tempdir");
    let result = run(
        &mut client,
        "real",
        dir.path(),
        &[
            "from IPython.core.interactiveshell import InteractiveShell\nisinstance(get_ipython(), InteractiveShell)",
            "from IPython import get_ipython as g\nip = g()\n(ip is get_ipython(), ip.user_ns is ip.user_global_ns, ip.user_ns is globals())",
            "import os\n(os.path.isdir(get_ipython().profile_dir.location), 'text/latex' in get_ipython().display_formatter.formatters)",
            "x = 1\nfrom __future__ import annotations\nx + 1",
            "%%capture captured\nprint('hidden')\ndisplay('shown later')",
            "(captured.stdout, len(captured.outputs))",
            "get_ipython().cellvisor_made_in != os.getpid()",
            "input('name? ')",
        ],
    );
    // The session runs what was asked: no notice (one would read as a restart).
    assert!(cell(&result, 0)["notice"].is_null(), "{result:#}");
    assert_eq!(shown(&result, 0), "True\n");
    assert_eq!(shown(&result, 1), "(True, True, True)\n");
    assert_eq!(shown(&result, 2), "(True, True)\n");
    assert_eq!(shown(&result, 3), "2\n");
    assert_eq!(shown(&result, 4), "", "%%capture let output through");
    assert!(displays(&result, 4).is_empty(), "{result:#}");
    assert_eq!(shown(&result, 5), "('hidden\\n', 1)\n");
    // The zygote made the shell before it forked this session's runner.
    assert_eq!(shown(&result, 6), "True\n");
    assert!(
        shown(&result, 7).contains("Kernel requested stdin; interactive input is not supported."),
        "{}",
        shown(&result, 7)
    );
    assert_eq!(cell(&result, 7)["status"], "error");
    assert!(
        engine(&mut client, "real").contains("IPython"),
        "{}",
        engine(&mut client, "real")
    );
    // An interrupted cell (its timeout) leaves the shell serving the next ones.
    let slow = client.eval_in(
        "real",
        dir.path(),
        json!([{"language": "py", "code": "import time\ntime.sleep(60)", "timeout": 1}]),
    );
    assert_ne!(cell(&slow, 0)["status"], "complete", "{slow:#}");
    let after = run(&mut client, "real", dir.path(), &["x + 40"]);
    assert_eq!(shown(&after, 0), "41\n");
    daemon.stop();
}

/// IPython's own notebook features, as a Jupyter kernel runs them: the `%%script` family,
/// `%%html`/`%%javascript`/`%%latex`, progress displays (`clear_output(wait=True)`,
/// `display_id` and `update_display`), `%run` without `.py`, `%load`, `%config`, pasted
/// prompts, `%timeit -o -q`, `_ipython_display_`, `%reload_ext`.
#[test]
fn ipython_s_notebook_features_come_out_as_in_jupyter() {
    let python = ipython_venv(&[]);
    let daemon = daemon_on(&python, "shell = \"ipython\"\n");
    let mut client = daemon.client();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("helper.py"),
        "print('helper ran as', __name__)\nanswer = 42\n",
    )
    .expect("write helper.py");
    let result = run(
        &mut client,
        "features",
        dir.path(),
        &[
            // First: IPython's own `%config` of the formatter stops reaching it once a
            // cell displayed an IPython object (as in a plain InteractiveShell).
            "%config PlainTextFormatter.max_width = 30",
            "list(range(12))",
            "%%bash --out said\necho hi from bash",
            "said",
            "%%html\n<b>bold</b>",
            "%%javascript\nconsole.log(1)",
            "%%latex\n$x^2$",
            "from IPython.display import clear_output, display, update_display\ndisplay('gone')\nprint('gone too')\nclear_output()\nfor i in range(3):\n    clear_output(wait=True)\n    print(i)\nh = display('first', display_id=True)\nh.update('second')\nupdate_display('third', display_id=h.display_id)",
            "%run helper",
            "answer",
            "%load helper.py",
            ">>> y = 5\n>>> y * 2",
            "In [3]: z = 7\nIn [4]: z + 1",
            "r = %timeit -o -q -n 1 -r 1 pass\n(type(r).__name__, r.loops)",
            "class Custom:\n    def _ipython_display_(self):\n        print('shown by _ipython_display_')\nCustom()",
            "%reload_ext autoreload",
        ],
    );
    for index in 0..16 {
        assert_eq!(
            cell(&result, index)["status"],
            "complete",
            "cell {index}: {result:#}"
        );
    }
    assert_eq!(
        shown(&result, 1),
        "[0,\n 1,\n 2,\n 3,\n 4,\n 5,\n 6,\n 7,\n 8,\n 9,\n 10,\n 11]\n"
    );
    assert_eq!(shown(&result, 3), "'hi from bash\\n'\n");
    let first_display = |index: usize, mime: &str| displays(&result, index)[0][mime].clone();
    assert_eq!(first_display(4, "text/html"), "<b>bold</b>\n");
    assert_eq!(
        first_display(5, "application/javascript"),
        "console.log(1)\n"
    );
    assert_eq!(first_display(6, "text/latex"), "$x^2$\n");
    // What came before a clear is gone from the result, as from a notebook's cell: the
    // progress loop ends showing its last line, and the displays after it stay.
    assert_eq!(shown(&result, 7), "2\n");
    let progress: Vec<Value> = displays(&result, 7)
        .iter()
        .map(|bundle| bundle["text/plain"].clone())
        .collect();
    assert_eq!(
        progress,
        [json!("'first'"), json!("'second'"), json!("'third'")]
    );
    assert_eq!(shown(&result, 8), "helper ran as __main__\n");
    assert_eq!(shown(&result, 9), "42\n");
    assert!(
        shown(&result, 10).contains("answer = 42"),
        "{}",
        shown(&result, 10)
    );
    assert_eq!(shown(&result, 11), "10\n");
    assert_eq!(shown(&result, 12), "8\n");
    assert_eq!(shown(&result, 13), "('TimeitResult', 1)\n");
    assert_eq!(shown(&result, 14), "shown by _ipython_display_\n");
    daemon.stop();
}

/// `%pylab` and SymPy's `init_printing()`, which registers its LaTeX and PNG formatters with
/// the shell's display formatter: those forms reach the display bundle.
#[test]
fn pylab_and_sympy_printing_reach_the_display_bundles() {
    let python = ipython_venv(&["sympy", "matplotlib", "numpy"]);
    let daemon = daemon_on(&python, "");
    let mut client = daemon.client();
    let dir = tempfile::tempdir().expect("tempdir");
    let result = run(
        &mut client,
        "science",
        dir.path(),
        &[
            "%pylab inline",
            "plot([1, 2, 3]);",
            "('np' in dir(), 'plt' in dir())",
            "from sympy import symbols, init_printing\ninit_printing()\nx = symbols('x')\nx**2",
            "init_printing(use_latex='matplotlib')\nx**3",
        ],
    );
    for index in 0..5 {
        assert_eq!(
            cell(&result, index)["status"],
            "complete",
            "cell {index}: {result:#}"
        );
    }
    assert!(
        displays(&result, 1)
            .iter()
            .any(|bundle| bundle["image/png"].is_string()),
        "{result:#}"
    );
    assert_eq!(shown(&result, 2), "(True, True)\n");
    let squared = &displays(&result, 3)[0];
    assert_eq!(
        squared["text/latex"], "$\\displaystyle x^{2}$",
        "{result:#}"
    );
    assert_eq!(output(&result, 3), "", "a rich value is one bundle");
    let cubed = &displays(&result, 4)[0];
    assert!(cubed["image/png"].is_string(), "{result:#}");
    daemon.stop();
}

/// The shortcuts a plain cell takes through IPython's shell give what IPython gives: a
/// printer registered for a scalar type (by type or by name) still makes its bundle, a
/// `_repr_html_` on a subclass still counts, top-level `await` still runs, and code mode's
/// `exit()` still ends a cell past its handlers.
#[test]
fn plain_cells_skip_nothing_ipython_would_show() {
    let python = ipython_venv(&[]);
    let daemon = daemon_on(&python, "");
    let mut client = daemon.client();
    let dir = tempfile::tempdir().expect("tempdir");
    let result = run(
        &mut client,
        "plain",
        dir.path(),
        &[
            "2",
            "class Big(int):\n    def _repr_html_(self):\n        return '<i>big</i>'\nBig(4)",
            "get_ipython().display_formatter.formatters['text/html'].for_type(int, lambda n: '<b>%d</b>' % n)\n3",
            "get_ipython().display_formatter.formatters['text/markdown'].for_type_by_name('builtins', 'float', lambda x: '*%s*' % x)\n1.5",
            "import asyncio\nawait asyncio.sleep(0)\n'awaited'",
            "try:\n    exit()\nfinally:\n    print('finally ran')",
            "'after'",
        ],
    );
    assert_eq!(shown(&result, 0), "2\n", "{result:#}");
    assert!(displays(&result, 0).is_empty(), "{result:#}");
    assert_eq!(
        displays(&result, 1)[0]["text/html"],
        "<i>big</i>",
        "{result:#}"
    );
    let html = displays(&result, 2);
    assert_eq!(html[0]["text/html"], "<b>3</b>", "{result:#}");
    assert_eq!(html[0]["text/plain"], "3", "{result:#}");
    let markdown = displays(&result, 3);
    assert_eq!(markdown[0]["text/markdown"], "*1.5*", "{result:#}");
    assert_eq!(shown(&result, 4), "'awaited'\n", "{result:#}");
    assert_eq!(cell(&result, 5)["status"], "complete", "{result:#}");
    assert_eq!(
        output(&result, 5),
        "",
        "exit() ended the cell past its finally"
    );
    assert_eq!(shown(&result, 6), "'after'\n", "{result:#}");
    daemon.stop();
}

/// Without IPython the built-in emulation runs the cells and says so; `shell = "ipython"`
/// then says why IPython's shell could not run them. `shell = "builtin"` keeps the
/// emulation where IPython is installed.
/// A cell that shows a display and a line, clears them, then draws a progress line three
/// times with `clear_output(wait=True)`; `CLEAR` is where `clear_output` gets its value.
const PROGRESS_LOOP: &str = "CLEAR\ndisplay({'gone': 1})\nprint('gone')\nclear_output()\n\
    for i in range(3):\n    clear_output(wait=True)\n    print(i)\nprint('done', end='')\n\
    clear_output(wait=True)";

/// Only what came after the last clear is in the result (a waiting clear at the end, with
/// nothing after it, clears nothing, as in a notebook).
fn assert_progress_loop_cleared(result: &Value) {
    assert_eq!(cell(result, 0)["status"], "complete", "{result:#}");
    assert_eq!(shown(result, 0), "2\ndone", "{result:#}");
    assert_eq!(displays(result, 0), Vec::<Value>::new(), "{result:#}");
}

#[test]
fn the_builtin_emulation_runs_where_ipython_is_missing_or_not_wanted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bare = bare_venv(dir.path());
    let daemon = daemon_on(&bare, "shell = \"ipython\"\n");
    let mut client = daemon.client();
    let result = run(
        &mut client,
        "bare",
        dir.path(),
        &["%pwd", "!echo $((6 * 7))"],
    );
    let notice = cell(&result, 0)["notice"].as_str().unwrap_or_default();
    assert!(
        notice.contains("built-in IPython emulation") && notice.contains("cannot import IPython"),
        "{notice}"
    );
    assert_eq!(shown(&result, 1), "42\n");
    assert!(engine(&mut client, "bare").contains("built-in shell"));
    // Without IPython, the emulation's shell clears the cell's output.
    let result = run(
        &mut client,
        "bare",
        dir.path(),
        &[PROGRESS_LOOP
            .replace(
                "CLEAR",
                "clear_output = get_ipython().display_pub.clear_output",
            )
            .as_str()],
    );
    assert_progress_loop_cleared(&result);
    daemon.stop();

    let daemon = daemon_on(&ipython_venv(&[]), "shell = \"builtin\"\n");
    let mut client = daemon.client();
    let result = run(
        &mut client,
        "chosen",
        dir.path(),
        &["type(get_ipython()).__module__"],
    );
    assert_eq!(shown(&result, 0), "'cellvisor_ipython'\n");
    assert!(cell(&result, 0)["notice"].is_null(), "{result:#}");
    // IPython's `clear_output`, imported where the emulation runs the cells, clears too.
    let result = run(
        &mut client,
        "chosen",
        dir.path(),
        &[PROGRESS_LOOP
            .replace(
                "CLEAR",
                "from IPython.display import clear_output\nclear_output",
            )
            .as_str()],
    );
    assert_progress_loop_cleared(&result);
    assert!(engine(&mut client, "chosen").contains("built-in shell"));
    daemon.stop();
}
