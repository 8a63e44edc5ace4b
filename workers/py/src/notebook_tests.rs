//! Tests of the notebook layer (`notebook.py`, `pretty.py`, `magics.py`, `inspector.py`)
//! through the real engine: pretty printing, history, help, automagic and the magics.
//!
//! The python found here may or may not have IPython; each test that depends on it makes
//! IPython unimportable (`sys.modules["IPython"] = None`) or checks for it itself, and says
//! which case it covers.

use super::*;

/// A harness whose cells run in `dir`.
fn harness_in(dir: &Path) -> Harness {
    let mut py = Harness::new();
    let ran = py.run(&format!(
        "import os\nos.chdir({:?})",
        dir.display().to_string()
    ));
    assert!(ran.completed(), "{}", ran.text());
    py
}

/// Makes IPython unimportable in this worker: the case of a python without it.
fn without_ipython(py: &mut Harness) {
    let ran = py
        .run("import sys\nsys.modules['IPython'] = None\nsys.modules['IPython.lib.pretty'] = None");
    assert!(ran.completed(), "{}", ran.text());
}

/// Whether the worker's python can import IPython.
fn has_ipython(py: &mut Harness) -> bool {
    let ran =
        py.run("import sys\nprint(sys.modules['cellvisor_shell'].real_ipython_spec() is not None)");
    ran.text() == "True\n"
}

/// A harness on a python with IPython: the one found here, else the test venv's (made by
/// `scripts/test-venv ipython`), whose cells run in `dir`.
fn with_ipython(dir: &Path) -> Harness {
    let mut py = harness_in(dir);
    if has_ipython(&mut py) {
        return py;
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-venv");
    let interpreter = Interpreter {
        program: venv.join("bin/python"),
        venv: Some(venv),
    };
    let mut py = Harness::with_interpreter(&interpreter).expect("the test venv's python starts");
    assert!(
        has_ipython(&mut py),
        "no python with IPython: run scripts/test-venv ipython"
    );
    let ran = py.run(&format!(
        "import os\nos.chdir({:?})",
        dir.display().to_string()
    ));
    assert!(ran.completed(), "{}", ran.text());
    py
}

const PRETTY_CASES: &str = "\
class A: pass
def f(a, b=2, *args, c, **kw): pass
import collections, re, types
cases = [type(1), int, A, {3, 1, 2}, frozenset('ba'), set(), list(range(30)),
         {'key%d' % i: 'value' * 3 for i in range(8)}, (1,), iter([1]), f, len,
         re.compile('a+'), types.SimpleNamespace(a=1), ValueError('bad', 2),
         collections.Counter('abracadabra'), collections.OrderedDict(a=1),
         collections.deque([1, 2], maxlen=3), collections.defaultdict(list, {1: [2]}),
         [[list(range(12))] * 3] * 2, {1: {2: {3: list(range(25))}}}, A(), [A(), A()]]
";

/// IPython absent: the built-in printer gives IPython's text for the built-in types.
#[test]
fn trailing_values_are_pretty_printed_without_ipython() {
    let mut py = Harness::new();
    without_ipython(&mut py);
    assert_eq!(py.run("type(1)").text(), "int\n");
    assert_eq!(py.run("{3, 1, 2}").text(), "{1, 2, 3}\n");
    assert_eq!(py.run("[1, 'a', None]").text(), "[1, 'a', None]\n");
    let long = py.run("list(range(30))").text();
    let expected: String = (0..30)
        .map(|i| match i {
            0 => "[0,\n".to_string(),
            29 => " 29]\n".to_string(),
            _ => format!(" {i},\n"),
        })
        .collect();
    assert_eq!(long, expected);
    assert_eq!(
        py.run("{'alpha': 'x' * 30, 'beta': 'y' * 30, 'gamma': 1}")
            .text(),
        format!(
            "{{'alpha': '{}',\n 'beta': '{}',\n 'gamma': 1}}\n",
            "x".repeat(30),
            "y".repeat(30)
        )
    );
    let iterator = py.run("iter([1, 2])").text();
    assert!(iterator.starts_with("<list_iterator at 0x"), "{iterator}");
    assert_eq!(
        py.run("def f(a, b=2): pass\nf").text(),
        "<function __main__.f(a, b=2)>\n"
    );
    assert_eq!(py.run("class A: pass\nA").text(), "__main__.A\n");
    let instance = py.run("A()").text();
    assert!(instance.starts_with("<__main__.A at 0x"), "{instance}");
    // `_repr_pretty_` gets this module's printer when IPython is absent.
    let ran = py.run(
        "class P:\n    def _repr_pretty_(self, p, cycle):\n        with p.group(2, 'P(', ')'):\n            p.text('a')\n            p.breakable()\n            p.pretty([1, 2])\nP()",
    );
    assert_eq!(ran.text(), "P(a [1, 2])\n");
    assert_eq!(py.run("x = {3, 1}\nx;").text(), "");
}

/// IPython present: built-in values never import it, and where it is imported the texts of
/// the built-in printer and `IPython.lib.pretty` are the same.
#[test]
fn the_builtin_printer_matches_ipython_and_spares_its_import() {
    let dir = tempfile::tempdir().unwrap();
    let mut py = with_ipython(dir.path());
    assert!(py.run(PRETTY_CASES).completed());
    for index in 0..23 {
        let shown = py.run(&format!("cases[{index}]"));
        assert!(
            shown.completed() && !shown.text().is_empty(),
            "{}",
            shown.text()
        );
    }
    let ran = py.run("import sys\nprint('IPython' in sys.modules)");
    assert_eq!(ran.text(), "False\n", "a built-in value imported IPython");
    let ran = py.run("[type(1), {2, 1}, list(range(40))]\nprint('IPython' in sys.modules)");
    assert!(ran.text().ends_with("False\n"), "{}", ran.text());
    let ran = py.run(&format!(
        "{PRETTY_CASES}import IPython.lib.pretty as ipy\n\
         ours = sys.modules['cellvisor_pretty'].pretty\n\
         diffs = [(ipy.pretty(c), ours(c)) for c in cases if ipy.pretty(c) != ours(c)]\n\
         print(len(cases), diffs)"
    ));
    assert_eq!(ran.text(), "23 []\n");
    // A `_repr_pretty_` goes to IPython's own printer.
    let ran = py.run(
        "del sys.modules['IPython.lib.pretty']\nclass P:\n    def _repr_pretty_(self, p, cycle):\n        p.text(type(p).__module__)\nP()",
    );
    assert_eq!(ran.text(), "IPython.lib.pretty\n");
}

/// Either case (IPython is not involved): In, Out, `_`, `_N`, `_iN` and the execution count.
#[test]
fn input_history_keeps_the_last_thousand_cells_only() {
    let mut py = Harness::new();
    for _ in 0..1100 {
        assert!(py.run("x = 1").completed());
    }
    let ran = py.run(
        "kept = [k for k in globals() if k.startswith('_i') and k[2:].isdigit()]\n\
         print(len(In), repr(In[1]), repr(In[1100]), repr(In[-1])[:11], len(kept) <= 1000, '_i1' in globals(), '_i1100' in globals())",
    );
    assert!(ran.completed(), "{}", ran.text());
    assert_eq!(ran.text(), "1102 '' 'x = 1' \"kept = [k  True False True\n");
}

#[test]
fn history_names_follow_ipython_numbering() {
    let mut py = Harness::new();
    assert!(py.run("x = 10").completed());
    assert_eq!(py.run("x * 2").text(), "20\n");
    assert_eq!(py.run("  ").text(), ""); // a blank cell is not counted
    assert_eq!(py.run("'third'").text(), "'third'\n");
    assert_eq!(py.run("x + 1;").text(), ""); // shown nowhere, so not in Out
    let ran = py.run(
        "print(_, __, Out[2], _2, sorted(Out))\nprint(repr(In[1]), repr(_i1), repr(_i), repr(_ii), repr(_iii))\nprint(len(In), _i5 == In[5], get_ipython().execution_count)",
    );
    assert!(ran.completed(), "{}", ran.text());
    assert_eq!(
        ran.text(),
        "third 20 20 20 [2, 3]\n'x = 10' 'x = 10' 'x + 1;' \"'third'\" 'x * 2'\n6 True 5\n"
    );
    // `In` holds the Python the cell became, `_iN` what was typed.
    assert!(py.run("%pwd").completed());
    let ran = py.run("print(In[6])\nprint(_i6)");
    assert_eq!(
        ran.text(),
        "get_ipython().run_line_magic('pwd', '')\n%pwd\n"
    );
    // `_` set by a cell stays until the cell's own value replaces it... as in IPython, only
    // when `_` was the history's.
    assert!(py.run("_ = 'mine'").completed());
    assert_eq!(py.run("5").text(), "5\n");
    assert_eq!(py.run("_").text(), "'mine'\n");
    assert_eq!(py.run("_9").text(), "5\n");
}

#[test]
fn history_magic_prints_the_session() {
    let mut py = Harness::new();
    assert!(py.run("a = 1").completed());
    assert_eq!(py.run("a + 1").text(), "2\n");
    let ran = py.run("%history -n -o");
    assert_eq!(
        ran.text(),
        "   1: a = 1\n   2: a + 1\n2\n   3: %history -n -o\n"
    );
    assert_eq!(py.run("%history 1-2").text(), "a = 1\na + 1\n");
    assert_eq!(
        py.run("%history -t -l 1").text(),
        "get_ipython().run_line_magic('history', '1-2')\n"
    );
    assert_eq!(
        py.run("%history -g a +").text(),
        "   2: a + 1\n   6: %history -g a +\n"
    );
    let ran = py.run("%history ~1/1");
    assert_eq!(
        failed_summary(&ran),
        "UsageError: %history ~1/1: only this session's history is kept"
    );
}

/// Either case: `obj?`, `obj??`, `?obj` and wildcard search print IPython's fields.
#[test]
fn help_prints_signature_docstring_file_and_source() {
    let mut py = Harness::new();
    let ran = py.run("len?");
    assert!(ran.completed(), "{}", ran.text());
    assert_eq!(
        ran.text(),
        "Signature: len(obj, /)\nDocstring: Return the number of items in a container.\nType:      builtin_function_or_method\n"
    );
    assert!(py
        .run("def add(a, b=1):\n    \"Adds.\"\n    return a + b")
        .completed());
    let ran = py.run("add?");
    let text = ran.text();
    assert!(
        text.starts_with("Signature: add(a, b=1)\nDocstring: Adds.\nFile:      <cell "),
        "{text}"
    );
    assert!(text.ends_with(">\nType:      function\n"), "{text}");
    let ran = py.run("??add");
    assert!(
        ran.text().starts_with("Signature: add(a, b=1)\nSource:   \ndef add(a, b=1):\n    \"Adds.\"\n    return a + b\nFile:      <cell "),
        "{}",
        ran.text()
    );
    let ran = py.run("n = [1, 2]\nn?");
    assert_eq!(
        ran.text(),
        format!(
            "Type:        list\nString form: [1, 2]\nLength:      2\nDocstring:  \n{}\n",
            "Built-in mutable sequence.\n\nIf no argument is given, the constructor creates a new empty list.\nThe argument must be an iterable if specified."
        )
    );
    assert_eq!(
        py.run("nothing_here?").text(),
        "Object `nothing_here` not found.\n"
    );
    assert_eq!(
        py.run("import math\nmath.*cos*?").text(),
        "math.acos\nmath.acosh\nmath.cos\nmath.cosh\n"
    );
    assert_eq!(py.run("%psearch -e builtin a*").text(), "add\n");
    let ran = py.run("%cd?");
    assert!(ran.text().starts_with("Docstring: "), "{}", ran.text());
    assert_eq!(py.run("ls?").text(), "Repr: <alias ls for 'ls -F'>\n");
    // A `?` inside a string or a comment is not help.
    assert_eq!(py.run("s = 'why?'  # really?\ns").text(), "'why?'\n");
}

/// Either case: a one-line cell may leave out `%`, unless a name shadows the magic.
#[test]
fn automagic_runs_magics_and_aliases_without_percent() {
    let dir = tempfile::tempdir().unwrap();
    let mut py = harness_in(dir.path());
    let ran = py.run("pwd");
    assert_eq!(ran.text(), format!("'{}'\n", dir.path().display()));
    assert!(py.run("mkdir sub").completed());
    assert!(dir.path().join("sub").is_dir());
    let ran = py.run("%%file sub/notes.txt\nhello\n");
    assert_eq!(ran.text(), "Writing sub/notes.txt\n");
    assert_eq!(py.run("cat sub/notes.txt").text(), "hello\n");
    assert_eq!(py.run("ls").text(), "sub/\n");
    let ran = py.run("cd sub");
    assert!(ran.text().ends_with("/sub\n"), "{}", ran.text());
    assert_eq!(py.run("print(len(_dh))").text(), "2\n");
    // A variable of that name wins, as does an assignment to it.
    assert!(py.run("ls = ['mine']").completed());
    assert_eq!(py.run("ls").text(), "['mine']\n");
    // Only a cell of one line.
    let ran = py.run("x = 1\ncd ..");
    assert!(
        failed_summary(&ran).starts_with("SyntaxError"),
        "{}",
        ran.text()
    );
    assert!(py.run("automagic off").completed());
    let ran = py.run("pwd");
    assert_eq!(failed_summary(&ran), "NameError: name 'pwd' is not defined");
}

#[test]
fn lsmagic_magic_xmode_prun_and_debugging() {
    let mut py = Harness::new();
    let listed = py.run("%lsmagic").text();
    assert!(
        listed.starts_with("Available line magics:\n%automagic  %autosave  %cat  %cd  "),
        "{listed}"
    );
    for name in [
        "%history",
        "%load_ext",
        "%pinfo",
        "%prun",
        "%xmode",
        "%%file",
        "%%writefile",
    ] {
        assert!(listed.contains(name), "{name} missing from {listed}");
    }
    assert!(listed.ends_with("\n\nAutomagic is ON, % prefix IS NOT needed for line magics.\n"));
    let help = py.run("%magic").text();
    assert!(
        help.contains("%xmode:\n    Sets how tracebacks look"),
        "{help}"
    );
    // Every automagic name is a line magic of the shell.
    let ran = py.run(
        "import sys\nshell = get_ipython()\nnb = sys.modules['cellvisor_notebook']\nprint(sorted(set(nb.AUTOMAGIC) - set(shell.magic_names('line'))))",
    );
    assert_eq!(ran.text(), "[]\n");
    assert_eq!(
        py.run("%xmode Minimal").text(),
        "Exception reporting mode: Minimal\n"
    );
    let ran = py.run("def boom():\n    raise ValueError('bad')\nboom()");
    assert_eq!(ran.text(), "ValueError: bad\n");
    assert_eq!(py.run("xmode").text(), "Exception reporting mode: Docs\n");
    assert_eq!(
        failed_summary(&py.run("%xmode loud")),
        "UsageError: %xmode: unknown mode 'loud'; the modes are Plain, Context, Verbose, Minimal, Docs, Doctest"
    );
    let profiled = py.run("%prun -l 3 sum(range(100))").text();
    assert!(profiled.contains("function calls in"), "{profiled}");
    assert!(profiled.contains("Ordered by: internal time"), "{profiled}");
    let ran = py.run("%pdb on");
    assert!(ran.completed());
    assert!(
        ran.text()
            .contains("%pdb: interactive debugging is not supported"),
        "{}",
        ran.text()
    );
    let ran = py.run("%debug\nprint('after')");
    assert!(ran
        .text()
        .ends_with("the traceback shows where the error happened\nafter\n"));
}

/// IPython absent: `%load_ext` names the extension and what is missing.
#[test]
fn load_ext_without_ipython_says_why() {
    let mut py = Harness::new();
    without_ipython(&mut py);
    let ran = py.run("%load_ext autoreload");
    let summary = failed_summary(&ran);
    assert!(
        summary.starts_with(
            "UsageError: %load_ext autoreload: IPython extensions need IPython, which "
        ),
        "{summary}"
    );
}

/// IPython present: an extension registers magics and callbacks on cellvisor's shell.
#[test]
fn load_ext_loads_an_extension_with_ipython() {
    let dir = tempfile::tempdir().unwrap();
    let mut py = with_ipython(dir.path());
    std::fs::write(
        dir.path().join("myext.py"),
        "calls = []\n\
         def load_ipython_extension(ip):\n\
         \x20   ip.register_magic_function(lambda line: 'hello ' + line, 'line', 'greet')\n\
         \x20   ip.events.register('post_execute', lambda: calls.append('post'))\n",
    )
    .unwrap();
    assert!(py.run("import sys\nsys.path.insert(0, '.')").completed());
    let ran = py.run("%load_ext myext");
    assert!(ran.completed(), "{}", ran.text());
    assert_eq!(py.run("%greet you").text(), "'hello you'\n");
    // post_execute ran after the cell above, the first after the extension was loaded.
    assert_eq!(py.run("import myext\nmyext.calls").text(), "['post']\n");
    assert_eq!(
        py.run("%load_ext myext").text(),
        "The myext extension is already loaded. To reload it, use:\n  %reload_ext myext\n"
    );
    assert_eq!(
        py.run("%load_ext json").text(),
        "The json module is not an IPython extension.\n"
    );
}
