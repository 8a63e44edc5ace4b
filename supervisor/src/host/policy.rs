//! What the configuration in force says about a request, and the one check of a request
//! every host shares.

use super::{Cellvisor, RequestError, MAX_CODE_BYTES, MAX_TOOL_NAME};
use crate::cell::EvalRequest;
use crate::locking::lock;
use crate::names::SessionName;
use crate::python_choice::PythonChoice;
use cellvisor_config::CellsConfig;
use cellvisor_ipc::Language;
use std::sync::Arc;

impl Cellvisor {
    /// What the configuration in force says about requests: read once per request.
    pub(super) fn request_policy(&self) -> RequestPolicy {
        let config = lock(&self.config);
        RequestPolicy {
            per_call: config.sessions.mode == cellvisor_config::SessionMode::PerCall,
            enabled: [
                (Language::Python, config.python.enabled),
                (Language::JavaScript, config.js.enabled),
                (Language::Lua, config.lua.enabled),
            ],
        }
    }

    /// The Python this request's cells run on, when it has Python cells. `cwd_modified`:
    /// the request's directory's modification time, when the request has just read it.
    pub(super) fn python_choice(
        &self,
        request: &EvalRequest,
        cwd_modified: Option<std::time::SystemTime>,
    ) -> Option<PythonChoice> {
        if !request.cells.iter().any(|c| c.language == Language::Python) {
            return None;
        }
        let worker_env = Arc::clone(&lock(&self.python_env));
        self.python_choices.choose(
            &worker_env,
            request.cwd.as_deref(),
            request.virtual_env.as_deref(),
            cwd_modified,
        )
    }

    pub(super) fn request_lock(&self, session: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = lock(&self.request_locks);
        locks.retain(|_, lock| Arc::strong_count(lock) > 1);
        Arc::clone(locks.entry(session.to_string()).or_default())
    }
}

/// The parts of the configuration a request's handling depends on.
pub(super) struct RequestPolicy {
    /// `sessions.mode = "per-call"`.
    pub(super) per_call: bool,
    /// `python.enabled`, `js.enabled`, `lua.enabled`.
    enabled: [(Language, bool); 3],
}

impl RequestPolicy {
    /// The message for a cell of a disabled language, `None` when it may run.
    pub(super) fn disabled(&self, language: Language) -> Option<String> {
        let off = self
            .enabled
            .iter()
            .any(|(lang, enabled)| *lang == language && !enabled);
        off.then(|| {
            let (name, section) = match language {
                Language::Python => ("Python", "python"),
                Language::JavaScript => ("JavaScript", "js"),
                Language::Lua => ("Lua", "lua"),
            };
            format!(
                "{name} cells are disabled by `{section}.enabled = false` in the configuration; \
                 set it to true (or remove it) to run them"
            )
        })
    }
}

pub(super) fn validate_session_name(name: &str) -> Result<SessionName, RequestError> {
    Ok(SessionName::parse(name)?)
}

/// The one check of a request, for every host (library, CLI, daemon, MCP): what it refuses
/// here no host refuses differently, and no host checks it again.
pub(super) fn validate(request: &EvalRequest, cells: &CellsConfig) -> Result<(), RequestError> {
    let max_cells = cells.max_cells_per_request;
    validate_session_name(&request.session)?;
    if let Some(id) = &request.request_id {
        cellvisor_client::once::check_request_id(id)?;
    }
    if request.cells.is_empty() {
        return Err(RequestError::NoCells);
    }
    if request.cells.len() > max_cells {
        return Err(RequestError::TooManyCells {
            count: request.cells.len(),
            max: max_cells,
        });
    }
    if let Some((index, cell)) = request
        .cells
        .iter()
        .enumerate()
        .find(|(_, c)| c.code.len() > MAX_CODE_BYTES)
    {
        return Err(RequestError::CodeTooLarge {
            index,
            len: cell.code.len(),
        });
    }
    if let Some(value) = request.timeout.filter(|v| !valid_timeout(*v)) {
        let (min, max, default) = timeout_bounds(cells);
        return Err(RequestError::RequestTimeout {
            value,
            min,
            max,
            default,
        });
    }
    for (index, cell) in request.cells.iter().enumerate() {
        if let Some(value) = cell.timeout {
            check_timeout(index, value, cells)?;
        }
    }
    if let Some(cwd) = &request.cwd {
        if !cwd.is_dir() {
            return Err(RequestError::Cwd(cwd.clone()));
        }
    }
    let mut seen = std::collections::HashSet::new();
    for tool in &request.tools {
        let name = tool.name.as_str();
        let valid = (1..=MAX_TOOL_NAME).contains(&name.len())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !valid {
            return Err(RequestError::ToolName(tool.name.clone()));
        }
        if !seen.insert(name) {
            return Err(RequestError::DuplicateTool(tool.name.clone()));
        }
    }
    Ok(())
}

/// The rule for a requested cell timeout: a positive number of seconds, nothing else. A
/// positive one out of the configured range is not refused: the supervisor raises it to
/// `cells.min-timeout` or cuts it to `cells.max-timeout` ([`CellsConfig::timeout_for`]), as
/// docs/config.md says, so a request that runs on one host runs on every other.
fn check_timeout(index: usize, value: f64, cells: &CellsConfig) -> Result<(), RequestError> {
    if valid_timeout(value) {
        return Ok(());
    }
    let (min, max, default) = timeout_bounds(cells);
    Err(RequestError::Timeout {
        index,
        value,
        min,
        max,
        default,
    })
}

fn valid_timeout(value: f64) -> bool {
    value.is_finite() && value > 0.0
}

/// `(min, max, default)` timeouts in seconds, for the messages that refuse a timeout.
fn timeout_bounds(cells: &CellsConfig) -> (f64, f64, f64) {
    let min = cells.min_timeout.as_secs_f64();
    let max = cells.max_timeout.as_secs_f64().max(min);
    (min, max, cells.default_timeout.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_must_be_positive_and_is_otherwise_brought_into_range() {
        let cells = CellsConfig::default();
        for kept in [0.001, 0.5, 1.0, 30.0, 600.0, 1e9, 1e300, f64::MAX] {
            assert_eq!(check_timeout(0, kept, &cells), Ok(()), "{kept}");
        }
        for refused in [0.0, -0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let message = check_timeout(2, refused, &cells)
                .expect_err("refused")
                .to_string();
            assert!(
                message.starts_with("cell 2: timeout must be a positive"),
                "{message}"
            );
            assert!(message.contains("1 to 600 seconds"), "{message}");
            assert!(message.contains("default of 30 seconds"), "{message}");
        }
        // What a kept timeout becomes is the config's part of the rule.
        assert_eq!(cells.timeout_for(Some(0.5)), cells.min_timeout);
        assert_eq!(cells.timeout_for(Some(1e300)), cells.max_timeout);
        let request = |timeout: f64| -> EvalRequest {
            serde_json::from_value(serde_json::json!(
                {"cells": [{"language": "js", "code": "1"}, {"language": "js", "code": "2", "timeout": timeout}]}
            ))
            .expect("request")
        };
        assert_eq!(validate(&request(1e300), &cells), Ok(()));
        let err = validate(&request(-1.0), &cells).expect_err("refused");
        assert!(
            matches!(err, RequestError::Timeout { index: 1, .. }),
            "{err}"
        );
    }

    #[test]
    fn tool_names_may_hold_dashes_and_dots() {
        let request = |name: &str| EvalRequest {
            tools: vec![crate::cell::ToolSpec {
                name: name.into(),
                description: String::new(),
                input_schema: serde_json::json!({}),
            }],
            ..serde_json::from_value(
                serde_json::json!({"cells": [{"language": "js", "code": "1"}]}),
            )
            .expect("request")
        };
        for good in [
            "list-dir",
            "github.search_issues",
            "3d",
            &"x".repeat(MAX_TOOL_NAME),
        ] {
            assert_eq!(
                validate(&request(good), &CellsConfig::default()),
                Ok(()),
                "{good}"
            );
        }
        for bad in ["", "a b", "a/b", "ünï", &"x".repeat(MAX_TOOL_NAME + 1)] {
            let err = validate(&request(bad), &CellsConfig::default()).expect_err(bad);
            assert!(err.to_string().contains("A-Z a-z 0-9 _ - ."), "{err}");
        }
    }

    #[test]
    fn session_names_are_checked() {
        assert!(validate_session_name("agent-1:task.2_x").is_ok());
        for bad in ["", "../etc", "a b", &"x".repeat(129)] {
            assert!(validate_session_name(bad).is_err(), "{bad:?}");
        }
    }
}
