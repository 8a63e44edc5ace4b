//! Startup modules: files every worker runs after its prelude, each time it starts (new,
//! restarted, reset), so a user's or a project's own helpers are always there.
//!
//! Two levels, each switched on by the supervisor through `CELLVISOR_STARTUP`
//! ([`cellvisor_ipc::env::STARTUP`]):
//! `$XDG_CONFIG_HOME/cellvisor/startup/` (the user's, `~/.config` by default) and
//! `<cwd>/.cellvisor/startup/` (the project's). Files with the language's extension run in
//! name order; a project file replaces the user's file of the same name. Each runs as a cell
//! would, in the cells' global namespace; what it prints is dropped. A module that fails does
//! not stop the worker: its report (the traceback) is returned for the first cell's notice.

use crate::runtime::{Engine, Interrupt, Outbox};
use cellvisor_ipc::{CellOutcome, ExecuteCell, FromWorker, Language};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Most of a failing module's report kept for the notice.
const MAX_REPORT_BYTES: usize = 16 * 1024;

/// The startup files for `language`, in the order they run.
pub fn files(
    language: Language,
    levels: &str,
    cwd: &Path,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Vec<PathBuf> {
    let extension = match language {
        Language::Python => "py",
        Language::JavaScript => "js",
        Language::Lua => "lua",
    };
    let wanted = |level: &str| levels.split(',').any(|l| l.trim() == level);
    let mut dirs = Vec::new();
    if wanted("user") {
        let config_home = env("XDG_CONFIG_HOME")
            .filter(|dir| !dir.is_empty())
            .map(PathBuf::from)
            .or_else(|| env("HOME").map(|home| PathBuf::from(home).join(".config")));
        if let Some(config_home) = config_home {
            dirs.push(config_home.join("cellvisor").join("startup"));
        }
    }
    if wanted("project") {
        dirs.push(cwd.join(".cellvisor").join("startup"));
    }
    let mut by_name = BTreeMap::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == extension) && path.is_file() {
                by_name.insert(entry.file_name(), path);
            }
        }
    }
    by_name.into_values().collect()
}

/// Runs this worker's startup modules on `engine`; the report of those that failed, if any.
pub fn run<E: Engine>(engine: &mut E) -> Option<String> {
    let levels = std::env::var(cellvisor_ipc::env::STARTUP).unwrap_or_default();
    if levels.trim().is_empty() {
        return None;
    }
    let cwd = std::env::current_dir().ok()?;
    let env = |key: &str| std::env::var_os(key);
    let mut failures = Vec::new();
    for file in files(E::LANGUAGE, &levels, &cwd, &env) {
        if let Some(report) = run_one(engine, &file) {
            failures.push(format!(
                "startup module {} failed:\n{}",
                file.display(),
                report.trim_end()
            ));
        }
    }
    (!failures.is_empty()).then(|| failures.join("\n"))
}

/// Runs one file as a cell; its error report if it failed.
fn run_one<E: Engine>(engine: &mut E, file: &Path) -> Option<String> {
    let code = match cell_code(E::LANGUAGE, file) {
        Ok(code) => code,
        Err(error) => return Some(format!("cannot read it: {error}")),
    };
    let (outbox, frames) = Outbox::new(64);
    // The module's output is only read for its error report; a thread drains it so a module
    // that prints a lot cannot block on a full queue.
    let collector = std::thread::spawn(move || {
        let mut text = Vec::new();
        for frame in frames {
            match frame {
                FromWorker::Output { data, .. } if text.len() < MAX_REPORT_BYTES => {
                    text.extend_from_slice(&data)
                }
                FromWorker::Pong { seq: END_OF_MODULE } => break,
                _ => {}
            }
        }
        String::from_utf8_lossy(&text).into_owned()
    });
    let cell = ExecuteCell {
        cell_id: 0,
        code,
        cwd: None,
        tools: Vec::new(),
        session_env: Vec::new(),
        env_changes: Vec::new(),
        task: Default::default(),
    };
    let outcome = engine.execute(&cell, &outbox, &Interrupt::default());
    outbox.send(FromWorker::Pong { seq: END_OF_MODULE });
    let printed = collector.join().unwrap_or_default();
    match outcome {
        Ok(CellOutcome::Completed) => None,
        Ok(CellOutcome::Failed { summary } | CellOutcome::OutOfMemory { summary, .. })
            if printed.trim().is_empty() =>
        {
            Some(summary)
        }
        Ok(CellOutcome::Failed { .. } | CellOutcome::OutOfMemory { .. }) => Some(printed),
        Ok(CellOutcome::Interrupted) => Some("interrupted".into()),
        Err(error) => Some(error.to_string()),
    }
}

/// Marks the end of one module's frames for the collector.
const END_OF_MODULE: u64 = u64::MAX;

/// The cell that runs `file`: Python and Lua load it by path, so its tracebacks name the
/// file; JavaScript runs its text as a cell (its functions and `var`s become globals).
fn cell_code(language: Language, file: &Path) -> std::io::Result<String> {
    let path = file.to_string_lossy();
    Ok(match language {
        Language::Python => {
            // A JSON string is a Python string literal.
            let quoted = serde_json::to_string(&path).unwrap_or_default();
            format!(
                "exec(compile(open({quoted}, encoding='utf-8').read(), {quoted}, 'exec'), globals())"
            )
        }
        Language::Lua => {
            let quoted = path.replace('\\', "\\\\").replace('"', "\\\"");
            format!("dofile(\"{quoted}\")")
        }
        Language::JavaScript => std::fs::read_to_string(file)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_files_replace_user_files_of_the_same_name_and_run_in_name_order() {
        let root = tempfile::tempdir().expect("tempdir");
        let user = root.path().join("config/cellvisor/startup");
        let project = root.path().join("work/.cellvisor/startup");
        std::fs::create_dir_all(&user).expect("user dir");
        std::fs::create_dir_all(&project).expect("project dir");
        for (dir, name) in [
            (&user, "b.py"),
            (&user, "a.py"),
            (&user, "a.js"),
            (&project, "a.py"),
            (&project, "c.py"),
        ] {
            std::fs::write(dir.join(name), "").expect("write");
        }
        let config_home = root.path().join("config");
        let env = |key: &str| (key == "XDG_CONFIG_HOME").then(|| config_home.clone().into());
        let cwd = root.path().join("work");
        let found = files(Language::Python, "user,project", &cwd, &env);
        assert_eq!(
            found,
            [
                project.join("a.py"),
                user.join("b.py"),
                project.join("c.py")
            ]
        );
        assert_eq!(
            files(Language::Python, "user", &cwd, &env),
            [user.join("a.py"), user.join("b.py")]
        );
        assert!(files(Language::JavaScript, "project", &cwd, &env).is_empty());
        assert!(files(Language::Python, "", &cwd, &env).is_empty());
    }
}
