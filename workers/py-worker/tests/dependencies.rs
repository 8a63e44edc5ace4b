//! `cellvisor-py-worker` links the Python engine and the worker core alone: a dependency that
//! pulls a JavaScript or Lua engine (or the JavaScript rewriter) into it fails here, before
//! an idle Python session's shim grows by the engines it never runs.

use std::process::Command;

/// The crates the Python worker program must never depend on.
const ENGINES: [&str; 3] = ["rquickjs", "mlua", "oxc"];

/// The packages `cargo tree` lists as normal dependencies of `package`, one name a line.
fn normal_dependencies(package: &str) -> Vec<String> {
    let output = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "--locked",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["--format", "{p}", "-p", package])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo tree -p {package} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("cargo tree prints UTF-8");
    text.lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The engines among `dependencies`.
fn engines_among(dependencies: &[String]) -> Vec<&String> {
    dependencies
        .iter()
        .filter(|name| ENGINES.iter().any(|engine| name.starts_with(engine)))
        .collect()
}

#[test]
fn the_python_worker_program_depends_on_no_javascript_or_lua_engine() {
    let dependencies = normal_dependencies("cellvisor-py-worker");
    // The listing is the program's: it holds the Python engine it runs.
    assert!(
        dependencies
            .iter()
            .any(|name| name == "cellvisor-worker-py"),
        "{dependencies:?}"
    );
    assert_eq!(engines_among(&dependencies), Vec::<&String>::new());
}

#[test]
fn the_check_sees_the_engines_where_they_are_linked() {
    // The same listing of the package that links every engine names each of them, so the
    // check above cannot pass for want of reading them.
    let dependencies = normal_dependencies("cellvisor-workers");
    let found = engines_among(&dependencies);
    for engine in ENGINES {
        assert!(
            found.iter().any(|name| name.starts_with(engine)),
            "{engine} missing from {dependencies:?}"
        );
    }
}
