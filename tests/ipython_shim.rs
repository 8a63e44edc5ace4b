//! cellvisor's `IPython` package for an interpreter without IPython (issue 40: "Python code
//! written for IPython keeps working"), end to end through the daemon on a bare virtualenv:
//! `IPython.display`'s objects and `display` arrive as the bundles IPython makes of them,
//! `raw=True` bundles as given, display ids and their updates, `clear_output`, IPython's
//! errors for a bad `Image`, `get_ipython()` as the emulation's shell; the shell choice is
//! not fooled by it, an IPython installed later wins, and where IPython is installed the
//! real one is used.

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

/// A daemon whose Python is `python`.
fn daemon_on(python: &Path) -> Daemon {
    Daemon::start_with(&format!(
        "[python]\ninterpreter = {:?}\n",
        python.display().to_string()
    ))
}

/// One `eval` of `codes` in `session`, run in `cwd`; the whole result.
fn run(client: &mut Client, session: &str, cwd: &Path, codes: &[&str]) -> Value {
    let cells: Vec<Value> = codes
        .iter()
        .map(|code| json!({"language": "py", "code": code}))
        .collect();
    client.eval_in(session, cwd, Value::Array(cells))
}

/// Cell `index`'s displays.
fn displays(result: &Value, index: usize) -> Vec<Value> {
    cell(result, index)["displays"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The engine `status` names for `session`'s Python.
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

fn assert_complete(result: &Value, cells: usize) {
    for index in 0..cells {
        assert_eq!(
            cell(result, index)["status"],
            "complete",
            "cell {index}: {result:#}"
        );
    }
}

const DISPLAY_MIME: &str = "application/x-cellvisor-display";

#[test]
fn ipython_display_works_on_a_python_without_ipython() {
    let dir = tempfile::tempdir().expect("tempdir");
    let daemon = daemon_on(&bare_venv(dir.path()));
    let mut client = daemon.client();
    let result = run(
        &mut client,
        "shim",
        dir.path(),
        &[
            "import IPython, IPython.display, IPython.core.display, IPython.core.getipython\n\
             import IPython.core.display_functions as functions\n\
             (IPython.__spec__.origin, hasattr(IPython, '__file__'), \
             IPython.display.HTML is IPython.core.display.HTML, \
             functions.display is IPython.display.display, \
             IPython.get_ipython() is get_ipython(), \
             IPython.core.getipython.get_ipython() is get_ipython())",
            "from IPython.display import display, update_display, HTML, Markdown, JSON, Image, SVG\n\
             print(display(HTML('<b>h</b>'), Markdown('**m**'), JSON({'k': [1, 2]})))",
            "import base64\npng = b'\\x89PNG\\r\\n\\x1a\\n' + bytes(range(16))\n\
             open('dot.png', 'wb').write(png)\n\
             display(Image(png), Image(filename='dot.png'), Image('dot.png'), \
             Image(b'\\xff\\xd8\\xff\\xe0'), \
             SVG('<?xml version=\"1.0\"?><svg xmlns=\"http://www.w3.org/2000/svg\"><circle r=\"1\"/></svg>'))\n\
             print(base64.b64encode(png).decode())",
            "display({'text/plain': 'p', 'text/html': '<i>p</i>', 'application/vnd.x+json': {'x': 1}}, raw=True)",
            "h = display(Markdown('v1'), display_id='progress')\nprint(h)\n\
             h.update(Markdown('v2'))\nupdate_display(HTML('v3'), display_id='progress')\n\
             print(display('text', display_id=True).display_id != 'progress')",
            "from IPython.display import clear_output\ndisplay(HTML('gone'))\nprint('gone too')\n\
             clear_output()\ndisplay(HTML('kept'), clear=True)\nprint('after')",
            "for bad in [lambda: Image(), lambda: Image(b'x', format='bmp')]:\n    try:\n        bad()\n    \
             except ValueError as error:\n        print(error)",
            "display(Image('missing.png'))",
            "class Custom:\n    def _ipython_display_(self):\n        print('shown by _ipython_display_')\n\
             display(Custom(), [1, 'a'], include=['text/plain'])",
            "!echo $((6 * 7))",
        ],
    );
    assert_complete(&result, 10);
    assert_eq!(
        output(&result, 0),
        "('cellvisor', False, True, True, True, True)\n"
    );
    // The shim decided nothing: the session runs the emulation, and says nothing about it.
    assert!(cell(&result, 0)["notice"].is_null(), "{result:#}");
    assert!(engine(&mut client, "shim").contains("built-in shell"));

    // `display` returns None, each object one bundle as IPython formats it.
    assert_eq!(output(&result, 1), "None\n");
    assert_eq!(
        displays(&result, 1),
        [
            json!({"text/html": "<b>h</b>", "text/plain": "<IPython.core.display.HTML object>"}),
            json!({"text/markdown": "**m**", "text/plain": "<IPython.core.display.Markdown object>"}),
            json!({"application/json": {"k": [1, 2]}, "text/plain": "<IPython.core.display.JSON object>"}),
        ]
    );
    // Images from data, a file name and a path, PNG and JPEG, as base64; SVG's element.
    let png = output(&result, 2).trim().to_string();
    let images = displays(&result, 2);
    assert_eq!(images.len(), 5, "{result:#}");
    for image in &images[..3] {
        assert_eq!(
            image,
            &json!({"image/png": png, "text/plain": "<IPython.core.display.Image object>"})
        );
    }
    assert_eq!(images[3]["image/jpeg"], "/9j/4A==");
    assert_eq!(
        images[4]["image/svg+xml"],
        "<svg xmlns=\"http://www.w3.org/2000/svg\"><circle r=\"1\"/></svg>"
    );
    // raw=True: the bundle as given.
    assert_eq!(
        displays(&result, 3),
        [json!({"text/plain": "p", "text/html": "<i>p</i>", "application/vnd.x+json": {"x": 1}})]
    );
    // A display id names the display; updates say so.
    assert_eq!(
        output(&result, 4),
        "<DisplayHandle display_id=progress>\nTrue\n"
    );
    let named = displays(&result, 4);
    let ids: Vec<Value> = named.iter().map(|b| b[DISPLAY_MIME].clone()).collect();
    assert_eq!(
        ids[..3],
        [
            json!({"display_id": "progress", "update": false}),
            json!({"display_id": "progress", "update": true}),
            json!({"display_id": "progress", "update": true}),
        ]
    );
    assert_eq!(named[1]["text/markdown"], "v2");
    assert_eq!(named[2]["text/html"], "v3");
    assert_eq!(named[3]["text/plain"], "'text'");
    assert_eq!(
        named[3][DISPLAY_MIME]["display_id"].as_str().map(str::len),
        Some(32)
    );
    // clear_output() and display(clear=True) clear what came before.
    assert_eq!(output(&result, 5), "after\n");
    assert_eq!(
        displays(&result, 5),
        [json!({"text/html": "kept", "text/plain": "<IPython.core.display.HTML object>"})]
    );
    // IPython's errors for a bad Image, word for word.
    assert_eq!(
        output(&result, 6),
        "No image data found. Expecting filename, url, or data.\n\
         Cannot embed the 'bmp' image format\n"
    );
    // An image whose file is missing: IPython's formatter error is shown, the text stays.
    assert!(
        output(&result, 7).contains("FileNotFoundError: No such file or directory: 'missing.png'"),
        "{result:#}"
    );
    assert_eq!(
        displays(&result, 7),
        [json!({"text/plain": "<IPython.core.display.Image object>"})]
    );
    // `_ipython_display_` shows itself; `include` keeps the types asked for.
    assert_eq!(output(&result, 8), "shown by _ipython_display_\n");
    assert_eq!(displays(&result, 8), [json!({"text/plain": "[1, 'a']"})]);
    assert_eq!(output(&result, 9), "42\n");

    // A checkpoint keeps the shim's objects (pickled by reference to IPython.core.display)
    // and its modules (by import), and a restore brings them back.
    run(
        &mut client,
        "shim",
        dir.path(),
        &["page = HTML('<b>kept</b>')
import IPython.display as ipd"],
    );
    client
        .call(
            "checkpoint",
            json!({"session": "shim", "language": "py", "name": "shim"}),
        )
        .expect("checkpoint answered");
    run(&mut client, "shim", dir.path(), &["del page, ipd"]);
    let restored = client
        .call(
            "restore",
            json!({"session": "shim", "language": "py", "name": "shim"}),
        )
        .expect("restore answered");
    let ledger = restored[0]["ledger"].to_string();
    assert!(
        ledger.contains("\"page\"") && ledger.contains("\"ipd (module)\""),
        "{restored:#}"
    );
    let shown = run(&mut client, "shim", dir.path(), &["ipd.display(page)"]);
    assert_complete(&shown, 1);
    assert_eq!(displays(&shown, 0)[0]["text/html"], "<b>kept</b>");
    daemon.stop();
}

/// The shim is found only when no real IPython is: one on `sys.path` from the start wins,
/// and one that appears after the shim was imported takes over at `%pip`, which drops the
/// shim's modules (objects made from them go on working).
#[test]
fn an_ipython_installed_later_is_the_one_imported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let daemon = daemon_on(&bare_venv(dir.path()));
    let mut client = daemon.client();
    let result = run(
        &mut client,
        "later",
        dir.path(),
        &[
            "import os, sys\nfrom IPython.display import display, HTML\nold = HTML('<b>old</b>')\n\
             import IPython\nIPython.__cellvisor_shim__",
            "os.makedirs('site/IPython')\n\
             open('site/IPython/__init__.py', 'w').write('installed = True\\n')\n\
             sys.path.append(os.path.abspath('site'))\nimport IPython\nhasattr(IPython, 'installed')",
            "%pip --version",
            "import IPython\n(IPython.installed, hasattr(IPython, '__cellvisor_shim__'))",
            "display(old)",
        ],
    );
    assert_complete(&result, 5);
    assert_eq!(output(&result, 0), "True\n");
    assert_eq!(output(&result, 1), "False\n", "{result:#}");
    assert_eq!(output(&result, 3), "(True, False)\n", "{result:#}");
    assert_eq!(displays(&result, 4)[0]["text/html"], "<b>old</b>");
    // A session that finds a real one from the start never sees the shim.
    let fresh = run(
        &mut client,
        "fresh",
        dir.path(),
        &["import os, sys\nsys.path.append(os.path.abspath('site'))\nimport IPython\nIPython.installed"],
    );
    assert_complete(&fresh, 1);
    assert_eq!(output(&fresh, 0), "True\n");
    daemon.stop();
}

/// Where IPython is installed, the same cells use it (and its shell), and its display ids
/// reach the bundles too.
#[test]
fn an_installed_ipython_is_used_instead_of_the_shim() {
    let dir = tempfile::tempdir().expect("tempdir");
    let python = common::test_venv(&["IPython"]).join("bin/python");
    let daemon = daemon_on(&python);
    let mut client = daemon.client();
    let result = run(
        &mut client,
        "real",
        dir.path(),
        &[
            "import IPython\nfrom IPython.display import display, HTML\n\
             (hasattr(IPython, '__cellvisor_shim__'), 'site-packages' in IPython.__file__)",
            "h = display(HTML('<b>1</b>'), display_id='d')\nh.update(HTML('<b>2</b>'))",
        ],
    );
    assert_complete(&result, 2);
    assert_eq!(output(&result, 0), "(False, True)\n");
    assert!(engine(&mut client, "real").contains("IPython"));
    let shown = displays(&result, 1);
    assert_eq!(shown[0]["text/html"], "<b>1</b>");
    assert_eq!(
        shown[0][DISPLAY_MIME],
        json!({"display_id": "d", "update": false})
    );
    assert_eq!(
        shown[1][DISPLAY_MIME],
        json!({"display_id": "d", "update": true})
    );
    daemon.stop();
}
