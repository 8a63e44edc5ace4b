//! Which languages the MCP tools offer: only the usable ones, as the anchor's `eval` tool
//! omits a backend that is disabled or unavailable from its description and schema. Python
//! is usable when `[python] enabled` and its interpreter (found as a cell's would be, from
//! the server's directory and environment) answers a trivial `-c` run; JavaScript and Lua
//! run in-process, so only their `enabled` keys count.

use cellvisor::Config;
use cellvisor_os::interpreter::{discover, Discovered};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long the interpreter's answer may take (a cold start on a loaded machine).
const PROBE_WITHIN: Duration = Duration::from_secs(20);

/// One language a tool may offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Offered {
    /// Its name in the tools' schemas (`py`).
    pub code: &'static str,
    /// Its name for people (`Python`).
    pub name: &'static str,
}

const PY: Offered = Offered {
    code: "py",
    name: "Python",
};
const JS: Offered = Offered {
    code: "js",
    name: "JavaScript",
};
const LUA: Offered = Offered {
    code: "lua",
    name: "Lua",
};

/// The languages usable under `config`, in the tools' order, and why any is left out (for
/// the server's log).
pub(super) fn usable(config: &Config) -> (Vec<Offered>, Vec<String>) {
    let python = if config.python.enabled {
        python_answers(config.python.interpreter.as_deref())
            .map_err(|why| format!("Python left out of the tools: {why}"))
    } else {
        Err("Python left out of the tools: [python] enabled = false".to_string())
    };
    let js = config
        .js
        .enabled
        .then_some(())
        .ok_or_else(|| "JavaScript left out of the tools: [js] enabled = false".to_string());
    let lua = config
        .lua
        .enabled
        .then_some(())
        .ok_or_else(|| "Lua left out of the tools: [lua] enabled = false".to_string());
    choose([(PY, python), (JS, js), (LUA, lua)])
}

/// The offered languages among `checked`, and the reasons of the others.
fn choose<const N: usize>(
    checked: [(Offered, Result<(), String>); N],
) -> (Vec<Offered>, Vec<String>) {
    let mut offered = Vec::new();
    let mut left_out = Vec::new();
    for (language, check) in checked {
        match check {
            Ok(()) => offered.push(language),
            Err(why) => left_out.push(why),
        }
    }
    (offered, left_out)
}

/// Whether the interpreter a cell would get runs: found, and `-c pass` exits 0 in time.
fn python_answers(configured: Option<&str>) -> Result<(), String> {
    let cwd = std::env::current_dir().map_err(|e| format!("no current directory: {e}"))?;
    let env = |key: &str| std::env::var_os(key);
    let program = match discover(&cwd, &env, configured.map(std::ffi::OsStr::new))? {
        Discovered::Found(interpreter) => interpreter.program,
        Discovered::UnresolvedShim(shim) => shim,
    };
    let mut child = Command::new(&program)
        .args(["-c", "pass"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{} cannot start: {e}", program.display()))?;
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => return Err(format!("{} -c pass: {status}", program.display())),
            Ok(None) if started.elapsed() < PROBE_WITHIN => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{} did not answer within {} s",
                    program.display(),
                    PROBE_WITHIN.as_secs()
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_languages_that_pass_their_check_are_offered() {
        let (offered, left_out) = choose([
            (PY, Err("Python left out: no python3 on PATH".into())),
            (JS, Ok(())),
            (LUA, Ok(())),
        ]);
        assert_eq!(offered, [JS, LUA]);
        assert_eq!(left_out, ["Python left out: no python3 on PATH"]);
    }

    #[test]
    fn a_missing_configured_interpreter_is_not_usable() {
        let why = python_answers(Some("/nonexistent/python3")).err();
        // A venv in the environment or directory wins over the configured interpreter.
        if std::env::var_os("VIRTUAL_ENV").is_none() {
            assert!(why.is_some_and(|w| w.contains("does not exist")));
        }
    }
}
