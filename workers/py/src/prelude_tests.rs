//! Tests of what cells see from the prelude: helpers, rich display, matplotlib and host tools.

use super::*;
use cellvisor_ipc::ToolInfo;
use serde_json::json;

/// A Python string literal for `text` (JSON string syntax is valid Python for these).
fn py_literal(text: &str) -> String {
    serde_json::Value::String(text.to_string()).to_string()
}

/// A harness whose cells run in `dir`.
fn harness_in(dir: &Path) -> Harness {
    let mut py = Harness::new();
    let ran = py.run(&format!(
        "import os\nos.chdir({})",
        py_literal(&dir.display().to_string())
    ));
    assert!(ran.completed(), "{}", ran.text());
    py
}

/// Runs `code`, expecting it to fail with `summary`, without a status event and without the
/// prelude's own frames in the traceback.
fn assert_fails(py: &mut Harness, code: &str, summary: &str) {
    let ran = py.run(code);
    assert_eq!(failed_summary(&ran), summary, "{code}: {}", ran.text());
    assert!(ran.statuses().is_empty(), "{code}: {:?}", ran.statuses());
    assert!(!ran.text().contains("cellvisor_prelude"), "{}", ran.text());
}

#[test]
fn read_write_append_report_status_events() {
    let dir = tempfile::tempdir().unwrap();
    let mut py = harness_in(dir.path());
    let ran = py.run(
        "write('sub/notes.txt', 'alpha\\nbeta\\ngamma\\n')\n\
         append('sub/notes.txt', 'delta')\n\
         r = append('new.txt', 'caf\\u00e9')\n\
         print(read('sub/notes.txt'), end='')\n\
         print(repr(read('sub/notes.txt', 2, 2)))\n\
         print(repr(read('sub/notes.txt', 2, 2, numbered=True)))\n\
         print(repr(read('sub/notes.txt', offset=9)), r)",
    );
    assert!(ran.completed(), "{}", ran.text());
    assert_eq!(
        ran.text(),
        "alpha\nbeta\ngamma\ndelta'beta\\ngamma\\n'\n\
         '     2\\tbeta\\n     3\\tgamma\\n'\n'' None\n"
    );
    assert_eq!(
        ran.statuses(),
        vec![
            json!({"op": "write", "path": "sub/notes.txt", "bytes": 17}),
            json!({"op": "append", "path": "sub/notes.txt", "bytes": 5}),
            json!({"op": "append", "path": "new.txt", "bytes": 5}),
            json!({"op": "read", "path": "sub/notes.txt", "lines": 4, "offset": 1}),
            json!({"op": "read", "path": "sub/notes.txt", "lines": 2, "offset": 2}),
            json!({"op": "read", "path": "sub/notes.txt", "lines": 2, "offset": 2}),
            json!({"op": "read", "path": "sub/notes.txt", "lines": 0, "offset": 9}),
        ]
    );
    assert!(ran.rich().is_empty(), "{:?}", ran.rich());
    let written = std::fs::read_to_string(dir.path().join("sub/notes.txt")).unwrap();
    assert_eq!(written, "alpha\nbeta\ngamma\ndelta");
    assert_eq!(
        py.run("write('new.txt', 'x')\nread('new.txt')").text(),
        "'x'\n"
    );

    for (code, summary) in [
        (
            "read('missing.txt')",
            "FileNotFoundError: [Errno 2] read: No such file or directory: 'missing.txt'",
        ),
        (
            "read('sub')",
            "IsADirectoryError: [Errno 21] read: Is a directory: 'sub'",
        ),
        (
            "read('new.txt', 0)",
            "ValueError: read: offset must be at least 1, not 0",
        ),
        (
            "read('new.txt', limit='3')",
            "TypeError: read: limit must be an integer, not str",
        ),
        ("read(3)", "TypeError: read: path must be a string, not int"),
        (
            "write('x.txt', b'bytes')",
            "TypeError: write: content must be a string, not bytes",
        ),
        (
            "write('', 'x')",
            "ValueError: write: path must not be empty",
        ),
        (
            "append('sub', 'x')",
            "IsADirectoryError: [Errno 21] append: Is a directory: 'sub'",
        ),
    ] {
        assert_fails(&mut py, code, summary);
    }
}

#[test]
fn text_helpers_sort_uniq_count_and_diff() {
    let mut py = Harness::new();
    let ran = py.run(
        "assert sort('b\\na\\nc\\na\\n') == 'a\\na\\nb\\nc\\n'\n\
         assert sort('b\\na', reverse=True) == 'b\\na'\n\
         assert sort('b\\na\\nb\\n', unique=True) == 'a\\nb\\n'\n\
         assert sort('\\u00e9\\nz\\nA') == 'A\\nz\\n\\u00e9'\n\
         assert sort('') == ''\n\
         assert uniq('a\\na\\nb\\na\\n') == 'a\\nb\\na\\n'\n\
         assert uniq('a\\na\\nb', count=True) == '      2 a\\n      1 b'\n\
         assert counter('x\\ny\\nx\\nz\\ny\\nx\\n') == [('x', 3), ('y', 2), ('z', 1)]\n\
         assert counter(['b', 'a', 'a', 'b', 'c'], limit=2) == [('b', 2), ('a', 2)]\n\
         assert counter([1, 2, 2, 3], reverse=True) == [(1, 1), (3, 1), (2, 2)]\n\
         assert diff('same\\n', 'same\\n') == ''\n\
         diff('a\\nb\\nc\\n', 'a\\nB\\nc\\nd\\n')",
    );
    assert!(ran.completed(), "{}", ran.text());
    assert_eq!(
        ran.text(),
        "'--- a\\n+++ b\\n@@ -1,3 +1,4 @@\\n a\\n-b\\n+B\\n c\\n+d'\n"
    );
    let ops: Vec<_> = ran.statuses().iter().map(|s| s["op"].clone()).collect();
    assert_eq!(
        ops,
        [
            "sort", "sort", "sort", "sort", "sort", "uniq", "uniq", "counter", "counter",
            "counter", "diff", "diff"
        ]
    );
    let statuses = ran.statuses();
    assert_eq!(statuses[0], json!({"op": "sort", "lines": 4}));
    assert_eq!(statuses[2], json!({"op": "sort", "lines": 2}));
    assert_eq!(statuses[6], json!({"op": "uniq", "lines": 2}));
    assert_eq!(statuses[7], json!({"op": "counter", "items": 3}));
    assert_eq!(
        statuses[10],
        json!({"op": "diff", "added": 0, "removed": 0})
    );
    assert_eq!(
        statuses[11],
        json!({"op": "diff", "added": 2, "removed": 1})
    );

    for (code, summary) in [
        ("sort(5)", "TypeError: sort: text must be a string, not int"),
        (
            "uniq(None)",
            "TypeError: uniq: text must be a string, not NoneType",
        ),
        (
            "counter([[1]])",
            "TypeError: counter: items must be strings or numbers, not list",
        ),
        (
            "counter(5)",
            "TypeError: counter: items must be a list or a string, not int",
        ),
        (
            "counter('a', limit=-1)",
            "ValueError: counter: limit must be at least 0, not -1",
        ),
        (
            "diff('a', 1)",
            "TypeError: diff: b must be a string, not int",
        ),
    ] {
        assert_fails(&mut py, code, summary);
    }
}

/// A small tree with a hidden file, a symlinked directory and four levels.
fn make_tree(root: &Path) {
    std::fs::create_dir_all(root.join("a/deep/d1")).unwrap();
    std::fs::write(root.join("a/deep/d1/f.txt"), "f").unwrap();
    std::fs::write(root.join("a/x.txt"), "x").unwrap();
    std::fs::write(root.join("b.txt"), "b").unwrap();
    std::fs::write(root.join(".hidden"), "h").unwrap();
    std::os::unix::fs::symlink(root.join("a"), root.join("link")).unwrap();
}

#[test]
fn tree_lists_like_the_tree_command() {
    let dir = tempfile::tempdir().unwrap();
    make_tree(&dir.path().join("t"));
    let mut py = harness_in(dir.path());
    let ran = py.run("print(tree('t'))\nprint(tree('t', 1, show_hidden=True))");
    assert!(ran.completed(), "{}", ran.text());
    assert_eq!(
        ran.text(),
        "t\n├── a/\n│   ├── deep/\n│   │   └── d1/\n│   └── x.txt\n├── b.txt\n└── link\n\
         t\n├── .hidden\n├── a/\n├── b.txt\n└── link\n"
    );
    assert_eq!(
        ran.statuses(),
        vec![
            json!({"op": "tree", "path": "t", "entries": 6}),
            json!({"op": "tree", "path": "t", "entries": 4}),
        ]
    );
    let ran = py.run("import os\nos.chdir('t/a')\nprint(tree())\nos.chdir('../..')");
    assert_eq!(
        ran.text(),
        ".\n├── deep/\n│   └── d1/\n│       └── f.txt\n└── x.txt\n"
    );
    for (code, summary) in [
        (
            "tree('missing')",
            "FileNotFoundError: [Errno 2] tree: No such file or directory: 'missing'",
        ),
        (
            "tree('t/b.txt')",
            "NotADirectoryError: [Errno 20] tree: Not a directory: 't/b.txt'",
        ),
        (
            "tree('t', 0)",
            "ValueError: tree: max_depth must be at least 1, not 0",
        ),
    ] {
        assert_fails(&mut py, code, summary);
    }
}

#[test]
fn env_and_output_read_the_process_environment_and_artifacts() {
    let artifacts = tempfile::tempdir().unwrap();
    std::fs::write(artifacts.path().join("abc.txt"), "first\n").unwrap();
    std::fs::write(artifacts.path().join("def.txt"), "second").unwrap();
    let mut py = Harness::new();
    let ran = py.run(&format!(
        "import os\n\
         assert env('CV_TEST_KEY', 'v1') is None\n\
         assert env('CV_TEST_KEY') == 'v1' == os.environ['CV_TEST_KEY']\n\
         assert env('CV_TEST_MISSING') is None\n\
         assert env()['CV_TEST_KEY'] == 'v1'\n\
         env('CELLVISOR_ARTIFACT_DIR', {})\n\
         assert output('abc') == 'first\\n'\n\
         output('abc', 'def')",
        py_literal(&artifacts.path().display().to_string())
    ));
    assert!(ran.completed(), "{}", ran.text());
    assert_eq!(ran.text(), "'first\\n\\nsecond'\n");
    assert_eq!(
        ran.statuses(),
        vec![
            json!({"op": "env", "key": "CV_TEST_KEY"}),
            json!({"op": "env", "key": "CV_TEST_KEY"}),
            json!({"op": "env", "key": "CV_TEST_MISSING"}),
            json!({"op": "env"}),
            json!({"op": "env", "key": cellvisor_ipc::env::ARTIFACT_DIR}),
            json!({"op": "output", "ids": ["abc"], "bytes": 6}),
            json!({"op": "output", "ids": ["abc", "def"], "bytes": 12}),
        ]
    );
    for (code, summary) in [
        (
            "output('zzz')",
            "FileNotFoundError: [Errno 2] output: unknown output id 'zzz'",
        ),
        (
            "output('../abc')",
            "ValueError: output: invalid output id '../abc'",
        ),
        (
            "output('a/b')",
            "ValueError: output: invalid output id 'a/b'",
        ),
        ("output()", "TypeError: output: give at least one output id"),
        ("env('A=B')", "ValueError: env: invalid variable name 'A=B'"),
        (
            "env('K', [1])",
            "TypeError: env: value must be a string, not list",
        ),
    ] {
        assert_fails(&mut py, code, summary);
    }
    let ran = py.run("del os.environ['CELLVISOR_ARTIFACT_DIR']\noutput('abc')");
    assert_eq!(
        failed_summary(&ran),
        "FileNotFoundError: [Errno 2] output: unknown output id 'abc'"
    );
}

#[test]
fn rich_reprs_become_mime_bundles_and_html_goes_out_as_it_is() {
    let mut py = Harness::new();
    let ran = py.run(
        "class Rich:\n\
         \x20   def _repr_markdown_(self): return '# hi'\n\
         \x20   def _repr_png_(self): return b'\\x89PNG'\n\
         \x20   def _repr_json_(self): return {'a': 1}\n\
         \x20   def __repr__(self): return 'Rich()'\n\
         class Bundle:\n\
         \x20   def _repr_mimebundle_(self, include=None, exclude=None):\n\
         \x20       return {'text/html': '<p>hi <i>there</i></p>', 'text/plain': 'Bundle!'}\n\
         class Page:\n\
         \x20   def _repr_html_(self): return '<h2>Title</h2><script>x()</script>'\n\
         display(Rich(), Bundle(), Page())",
    );
    assert!(ran.completed(), "{}", ran.text());
    let rich = ran.rich();
    assert_eq!(
        rich[0],
        json!({"text/markdown": "# hi", "image/png": "iVBORw==", "application/json": {"a": 1},
               "text/plain": "Rich()"})
    );
    // HTML is the text hosts' to convert (cellvisor-cli's `render`), not the prelude's.
    assert_eq!(
        rich[1],
        json!({"text/html": "<p>hi <i>there</i></p>", "text/plain": "Bundle!"})
    );
    assert_eq!(rich[2]["text/html"], "<h2>Title</h2><script>x()</script>");
    assert!(rich[2].get("text/markdown").is_none(), "{}", rich[2]);
    assert!(rich[2]["text/plain"]
        .as_str()
        .unwrap()
        .starts_with("<__main__.Page object"));
}

#[test]
fn trailing_values_with_a_rich_form_are_also_displayed() {
    let mut py = Harness::new();
    let ran = py.run("{'k': [1, 2]}");
    assert_eq!(ran.text(), "{'k': [1, 2]}\n");
    assert_eq!(
        ran.displays,
        vec![json!({"application/json": {"k": [1, 2]}, "text/plain": "{'k': [1, 2]}"})]
    );
    assert_eq!(
        py.run("[1, 'a']").displays,
        vec![json!({"application/json": [1, "a"], "text/plain": "[1, 'a']"})]
    );
    for plain in [
        "5",
        "'text'",
        "(1, 2)",
        "[object()]",
        "None",
        "x = {'a': 1}",
    ] {
        let ran = py.run(plain);
        assert!(ran.completed(), "{plain}: {}", ran.text());
        assert!(ran.displays.is_empty(), "{plain}: {:?}", ran.displays);
    }
    // Big values: the trailing copy is skipped, an explicit display becomes a note.
    let ran = py.run("big = list(range(300_000))\nbig");
    assert!(ran.completed() && ran.displays.is_empty());
    let ran = py.run("display('x' * 9_000_000)");
    assert_eq!(ran.displays.len(), 1);
    assert!(ran.displays[0]["text/plain"]
        .as_str()
        .unwrap()
        .starts_with("[cellvisor: a display of 9000017 bytes was dropped"));
    // A trailing value with a rich repr is one bundle (its text is in it, not printed too).
    let ran =
        py.run("class H:\n    def _repr_html_(self): return '<b>x</b>'\n    def __repr__(self): return 'H()'\nH()");
    assert_eq!(ran.text(), "");
    assert_eq!(
        ran.displays,
        vec![json!({"text/html": "<b>x</b>", "text/plain": "H()"})]
    );
}

/// target/test-venv with matplotlib, made by scripts/test-venv (which installs it once).
fn matplotlib_interpreter() -> Interpreter {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-venv");
    let made = std::process::Command::new(&script)
        .arg("matplotlib")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        made.status.success(),
        "{} matplotlib failed (a virtualenv with matplotlib from PyPI is needed for this \
         test): {}",
        script.display(),
        String::from_utf8_lossy(&made.stderr)
    );
    let program = PathBuf::from(String::from_utf8_lossy(&made.stdout).trim());
    let venv = program
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf);
    Interpreter { program, venv }
}

fn png_of(bundle: &serde_json::Value) -> Vec<u8> {
    base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        bundle["image/png"].as_str().expect("an image/png string"),
    )
    .expect("standard base64")
}

#[test]
fn matplotlib_figures_are_sent_as_png() {
    let mut py = Harness::with_interpreter(&matplotlib_interpreter()).expect("venv python starts");
    let ran = py.run(
        "import matplotlib.pyplot as plt\n\
         plt.plot([1, 2, 3], [1, 4, 9])\n\
         plt.show()\n\
         print('after show', plt.get_fignums())",
    );
    assert!(ran.completed(), "{}", ran.text());
    assert_eq!(ran.text(), "after show []\n", "no backend warning either");
    assert_eq!(ran.displays.len(), 1, "{:?}", ran.displays);
    assert_eq!(
        ran.displays[0]["text/plain"],
        "<Figure size 640x480 with 1 Axes>"
    );
    let png = png_of(&ran.displays[0]);
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{:?}", &png[..8]);
    assert!(png.len() > 5_000, "a real plot, not {} bytes", png.len());

    // Figures left open are sent at the end of the cell, even one that fails.
    let ran = py.run(
        "fig, ax = plt.subplots(figsize=(3, 2))\n\
         ax.bar(['a', 'b'], [1, 2])\n\
         import matplotlib\n\
         matplotlib.get_backend()",
    );
    assert_eq!(ran.text(), "'Agg'\n");
    assert_eq!(ran.displays.len(), 1, "{:?}", ran.displays);
    assert_eq!(
        ran.displays[0]["text/plain"],
        "<Figure size 300x200 with 1 Axes>"
    );
    assert!(png_of(&ran.displays[0]).starts_with(b"\x89PNG\r\n\x1a\n"));
    let ran = py.run("plt.figure()\nplt.plot([3, 1])\n1 / 0");
    assert_eq!(failed_summary(&ran), "ZeroDivisionError: division by zero");
    assert_eq!(ran.displays.len(), 1, "{:?}", ran.displays);
    assert!(py.run("plt.get_fignums()").text() == "[]\n");
}

fn tools() -> Vec<ToolInfo> {
    vec![
        ToolInfo {
            name: "add".into(),
            description: "Adds two numbers".into(),
            input_schema_json: r#"{"type":"object","properties":{"a":{},"b":{}}}"#.into(),
        },
        ToolInfo {
            name: "fail".into(),
            description: "Always fails".into(),
            input_schema_json: "{}".into(),
        },
        ToolInfo {
            name: "hang".into(),
            description: "Never answers".into(),
            input_schema_json: "{}".into(),
        },
    ]
}

/// The host side of [`tools`].
fn host(name: &str, args_json: &str) -> Option<Result<String, String>> {
    let args: serde_json::Value = serde_json::from_str(args_json).ok()?;
    match name {
        "add" => {
            let sum = args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0);
            Some(Ok(json!({"sum": sum, "echo": args}).to_string()))
        }
        "fail" => Some(Err("disk on fire".into())),
        _ => None,
    }
}

#[test]
fn host_tools_are_called_synchronously() {
    let mut py = Harness::new();
    let none = Interrupt::default();
    let ran = py.run_full(
        "r1 = tool.add(a=2, b=3)\n\
         r2 = tools.add({'a': 1}, b=1)\n\
         print(r1['sum'], r2['sum'], r2['echo'], [t['name'] for t in ALL_TOOLS])\n\
         ALL_TOOLS[0]",
        &none,
        tools(),
        host,
    );
    assert!(ran.completed(), "{}", ran.text());
    assert_eq!(
        ran.text(),
        // A trailing dict past 79 columns wraps one item a line, as IPython prints it.
        "5 2 {'a': 1, 'b': 1} ['add', 'fail', 'hang']\n{'name': 'add',\n \
         'description': 'Adds two numbers',\n 'declaration': 'declare function add(args: { \
         a?: unknown; b?: unknown }): Promise<unknown>;',\n 'input_schema': {'properties': \
         {'a': {}, 'b': {}}, 'type': 'object'}}\n"
    );
    assert_eq!(
        ran.tool_calls,
        vec![
            ("add".to_string(), r#"{"a":2,"b":3}"#.to_string()),
            ("add".to_string(), r#"{"a":1,"b":1}"#.to_string()),
        ]
    );

    let ran = py.run_full(
        "try:\n    tool.fail(x=1)\nexcept ToolError as e:\n    print('caught', e)\ntool.fail()",
        &none,
        tools(),
        host,
    );
    assert_eq!(failed_summary(&ran), "ToolError: tool.fail: disk on fire");
    assert!(ran.text().starts_with("caught tool.fail: disk on fire\n"));

    let ran = py.run_full("tool.nope(q=1)", &none, tools(), host);
    assert_eq!(
        failed_summary(&ran),
        "UnknownToolError: no tool named 'nope'; declared tools: add, fail, hang"
    );
    assert!(ran.tool_calls.is_empty());
    let ran = py.run_full("tool.add(1, 2)", &none, tools(), host);
    assert_eq!(
        failed_summary(&ran),
        "TypeError: tool.add takes keyword arguments or one dict of arguments"
    );
    // Tools are per cell: a cell without them sees none.
    let ran =
        py.run("print(ALL_TOOLS, hasattr(tool, 'add'), isinstance(ToolError('x'), RuntimeError))");
    assert_eq!(ran.text(), "[] False True\n");
}

#[test]
fn interrupt_breaks_a_tool_wait_and_later_calls_still_work() {
    let mut py = Harness::new();
    let (interrupt, raiser) = py.interrupt_after(Duration::from_millis(300));
    let ran = py.run_full("tool.hang()", &interrupt, tools(), host);
    raiser.join().unwrap();
    assert!(
        matches!(ran.outcome, Ok(CellOutcome::Interrupted)),
        "{:?}: {}",
        ran.outcome,
        ran.text()
    );
    let ran = py.run_full(
        "tool.add(a=20, b=22)['sum']",
        &Interrupt::default(),
        tools(),
        host,
    );
    assert_eq!(ran.text(), "42\n");
}

#[test]
fn code_mode_helpers_text_image_audio_notify_store_load_exit() {
    let dir = tempfile::tempdir().unwrap();
    let mut py = harness_in(dir.path());
    let store_dir = py_literal(&dir.path().join("store").display().to_string());
    let ran = py.run(&format!(
        "import os\nos.environ['CELLVISOR_STORE_DIR'] = {store_dir}\n\
         text('raw'); text({{'a': [1, None]}}); notify('halfway')\n\
         image('data:image/png;base64,iVBO', 'low'); audio('data:audio/wav;base64,UklG')\n\
         image({{'type': 'image', 'data': 'R0lG', 'mimeType': 'image/gif'}})\n\
         print(load('missing'))"
    ));
    assert!(ran.completed(), "{}", ran.text());
    assert_eq!(ran.text(), "raw\n{\"a\":[1,null]}\nNone\n");
    assert_eq!(
        ran.statuses(),
        vec![
            json!({"op": "notify", "message": "halfway"}),
            json!({"op": "load", "key": "missing", "found": false}),
        ]
    );
    assert_eq!(
        ran.rich(),
        vec![
            json!({"image/png": "iVBO", "text/plain": "<image image/png>",
                   "application/x-cellvisor-image-detail": "low"}),
            json!({"audio/wav": "UklG", "text/plain": "<audio audio/wav>"}),
            json!({"image/gif": "R0lG", "text/plain": "<image image/gif>"}),
        ]
    );
    // The counter of the code-mode API, synchronous.
    let counter = "store('c', (load('c') or 0) + 1); text(load('c'))";
    assert_eq!(py.run(counter).text(), "1\n");
    assert_eq!(py.run(counter).text(), "2\n");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("store/c.json")).unwrap(),
        "2"
    );
    assert_fails(
        &mut py,
        "store('f', {'g': lambda: 1})",
        "TypeError: store: value['g'] is a function, which JSON cannot hold",
    );
    assert_fails(
        &mut py,
        "store('../x', 1)",
        "ValueError: store: invalid key \"../x\": use 1 to 128 characters from A-Z a-z 0-9 _ - . \
         (not starting with a dot)",
    );
    assert_fails(
        &mut py,
        "notify('  ')",
        "ValueError: notify: the message must not be empty",
    );
    // exit() ends the cell successfully; what was printed and stored before it is kept.
    let ran = py.run("print('before'); store('k', [1]); exit(); print('after')");
    assert!(ran.completed(), "{}", ran.text());
    assert_eq!(ran.text(), "before\n");
    assert_eq!(py.run("load('k')").text(), "[1]\n");
    let ran = py.run("import sys\nsys.exit(0)");
    assert!(ran.completed(), "{}", ran.text());
    let ran = py.run("exit(3)");
    assert_eq!(failed_summary(&ran), "SystemExit: 3");
}

#[test]
fn tools_with_dashes_and_dots_are_reachable_by_identifier_and_searchable() {
    let mut py = Harness::new();
    let tools = vec![
        ToolInfo {
            name: "list-dir".into(),
            description: "Lists a directory".into(),
            input_schema_json:
                r#"{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}"#
                    .into(),
        },
        ToolInfo {
            name: "github.search_issues".into(),
            description: "Searches issues on GitHub".into(),
            input_schema_json: "{}".into(),
        },
    ];
    let ran = py.run_full(
        "print(tool['list-dir'](path='.'), tool.list_dir(path='src'), tools.github_search_issues(q=1))\n\
         print(ALL_TOOLS[0]['declaration'])\n\
         print([t['name'] for t in tools.tool_search(query='issues')['tools']])\n\
         print(tools.tool_search({'query': 'list_dir', 'limit': 1}))\n\
         for bad in ({'query': ' '}, {'query': 'x', 'limit': 0}):\n\
         \x20   try:\n\
         \x20       tools.tool_search(bad)\n\
         \x20   except ValueError as e:\n\
         \x20       print(e)",
        &Interrupt::default(),
        tools,
        |name, args| Some(Ok(json!({"tool": name, "args": args}).to_string())),
    );
    assert!(ran.completed(), "{}", ran.text());
    assert_eq!(
        ran.text(),
        "{'args': '{\"path\":\".\"}', 'tool': 'list-dir'} {'args': '{\"path\":\"src\"}', 'tool': \
         'list-dir'} {'args': '{\"q\":1}', 'tool': 'github.search_issues'}\n\
         declare function list_dir(args: { path: string }): Promise<unknown>;\n\
         ['github.search_issues']\n\
         {'tools': [{'description': 'Lists a directory', 'name': 'list-dir'}]}\n\
         query must not be empty\n\
         limit must be greater than zero\n"
    );
    let names: Vec<_> = ran
        .tool_calls
        .iter()
        .map(|(name, _)| name.as_str())
        .collect();
    assert_eq!(names, ["list-dir", "list-dir", "github.search_issues"]);
}

#[test]
fn the_python_files_name_the_variables_as_ipc_does() {
    use crate::install::ZYGOTE_SOURCE;
    use cellvisor_ipc::env::{
        ARTIFACT_DIR, FORKED_PYTHON, PRELOAD, SANDBOX, STORE_DIR, SYNC_TOKEN, ZYGOTE,
    };
    for (source, line) in [
        (
            PRELUDE_SOURCE,
            format!("ARTIFACT_DIR_VAR = \"{ARTIFACT_DIR}\""),
        ),
        (PRELUDE_SOURCE, format!("STORE_DIR_VAR = \"{STORE_DIR}\"")),
        (LAUNCHER_SOURCE, format!("os.environ.get(\"{SANDBOX}\")")),
        (
            RUNNER_SOURCE,
            format!("os.environ.pop(\"{SYNC_TOKEN}\", \"\")"),
        ),
        (
            LAUNCHER_SOURCE,
            format!("os.environ.pop(\"{ZYGOTE}\", \"\") == \"1\""),
        ),
        (
            ZYGOTE_SOURCE,
            format!("os.environ.pop(\"{PRELOAD}\", \"\")"),
        ),
        (
            ZYGOTE_SOURCE,
            format!("FORKED_PYTHON_VAR = \"{FORKED_PYTHON}\""),
        ),
    ] {
        assert!(source.contains(&line), "the Python side lost `{line}`");
    }
}
