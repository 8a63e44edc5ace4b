//! What a kernel's shell answers the same way through the gateway and the ZMQ kernel: the
//! requests no cell runs for, and an execution's outcome as its `execute_reply`. Plain data.

use super::history::History;
use super::mapping::{self, Failure};
use cellvisor::cell::CellResult;
use cellvisor::Language;
use serde_json::{json, Value};

/// The reply (type and content) to a shell request answered without a cell
/// (`kernel_info`, `is_complete`, `history`, `comm_info`); `None` for the others.
pub fn answer(
    language: Language,
    history: &History,
    msg_type: &str,
    content: &Value,
) -> Option<(&'static str, Value)> {
    Some(match msg_type {
        "kernel_info_request" => ("kernel_info_reply", mapping::kernel_info(language)),
        "is_complete_request" => {
            let code = content["code"].as_str().unwrap_or_default();
            ("is_complete_reply", mapping::is_complete(language, code))
        }
        "history_request" => (
            "history_reply",
            json!({"status": "ok", "history": history.answer(content)}),
        ),
        "comm_info_request" => ("comm_info_reply", json!({"status": "ok", "comms": {}})),
        _ => return None,
    })
}

/// The `execute_reply` content of a cell that ran (`Ok`) or that the daemon refused (`Err`,
/// named `CellvisorError`), and its failure, if any.
pub fn outcome(ran: &Result<CellResult, String>, count: u64) -> (Value, Option<Failure>) {
    match ran {
        Ok(result) => (
            mapping::execute_reply(Some(result), count),
            mapping::failure_of(result),
        ),
        Err(refused) => {
            let failure = Failure {
                ename: "CellvisorError".into(),
                evalue: refused.clone(),
            };
            let mut content = failure.error_content();
            content["status"] = "error".into();
            content["execution_count"] = count.into();
            (content, Some(failure))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_without_a_cell_are_answered_and_others_are_not() {
        let mut history = History::default();
        history.remember(1, "x = 1");
        let ask = |t, c: Value| answer(Language::Lua, &history, t, &c);
        let (kind, info) = ask("kernel_info_request", json!({})).unwrap();
        assert_eq!(
            (kind, &info["language_info"]["name"]),
            ("kernel_info_reply", &json!("lua"))
        );
        let (_, done) = ask("is_complete_request", json!({"code": "do"})).unwrap();
        assert_eq!(done["status"], "incomplete");
        let (_, past) = ask(
            "history_request",
            json!({"hist_access_type": "tail", "n": 1}),
        )
        .unwrap();
        assert_eq!(past["history"], json!([[0, 1, "x = 1"]]));
        assert_eq!(
            ask("comm_info_request", json!({})).unwrap().1["comms"],
            json!({})
        );
        assert_eq!(ask("execute_request", json!({"code": "1"})), None);
    }

    #[test]
    fn a_refused_cell_is_a_cellvisor_error() {
        let (reply, failure) = outcome(&Err("the session is closing".into()), 3);
        assert_eq!(reply["status"], "error");
        assert_eq!(reply["execution_count"], 3);
        assert_eq!(reply["ename"], "CellvisorError");
        assert_eq!(failure.unwrap().evalue, "the session is closing");
    }
}
