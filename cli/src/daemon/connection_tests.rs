use super::*;
use cellvisor::daemon::protocol::method;

fn call() -> (
    ToolCallRequest,
    tokio::sync::oneshot::Receiver<Result<Value, String>>,
) {
    let (reply, answer) = tokio::sync::oneshot::channel();
    let request = ToolCallRequest {
        name: "t".into(),
        arguments: Value::Null,
        reply,
    };
    (request, answer)
}

fn request(method: &str, params: Value) -> Request {
    match protocol::parse_line(
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
            .to_string()
            .as_bytes(),
    ) {
        Incoming::Request(request) => request,
        _ => panic!("not a request"),
    }
}

#[test]
fn a_bound_connection_refuses_other_sessions_only() {
    let eval = |session: Value| {
        request(
            method::EVAL,
            serde_json::json!({"session": session, "cells": []}),
        )
    };
    assert!(other_session("a", &eval("a".into())).is_none());
    let refused = other_session("a", &eval("b".into())).expect("another session");
    assert_eq!(refused.code, code::WRONG_SESSION);
    assert!(
        refused.message.contains("\"a\"") && refused.message.contains("\"b\""),
        "{}",
        refused.message
    );
    // A request naming no session is for `default`.
    assert!(other_session(
        "a",
        &request(method::WAIT, serde_json::json!({"cell_id": 1}))
    )
    .is_some());
    assert!(other_session("default", &request(method::CLOSE, serde_json::json!({}))).is_none());
    for free in [method::STATUS, method::INITIALIZE, method::DRAIN] {
        assert!(
            other_session("a", &request(free, serde_json::json!({}))).is_none(),
            "{free}"
        );
    }
}

#[tokio::test]
async fn unanswered_tool_calls_are_bounded_per_connection() {
    let (out, mut out_rx) = mpsc::channel(MAX_PENDING_TOOL_CALLS * 2);
    let connection = Connection {
        out,
        tool_calls: Mutex::default(),
        next_tool_call: AtomicU64::new(1),
        principal: Principal::operator(),
        origin: cellvisor::Origin::Local,
        owned: Default::default(),
    };
    let mut waiting = Vec::new();
    for _ in 0..MAX_PENDING_TOOL_CALLS {
        let (request, answer) = call();
        forward_tool_call(&connection, &Value::from(1), request).await;
        waiting.push(answer);
    }
    let (request, mut refused) = call();
    forward_tool_call(&connection, &Value::from(1), request).await;
    let message = refused
        .try_recv()
        .expect("answered at once")
        .expect_err("refused");
    assert!(message.contains("at most 1024"), "{message}");
    // Calls whose cells ended make room again.
    waiting.truncate(10);
    let (request, mut accepted) = call();
    forward_tool_call(&connection, &Value::from(1), request).await;
    assert!(
        accepted.try_recv().is_err(),
        "sent to the host, not refused"
    );
    assert_eq!(lock(&connection.tool_calls).len(), 11);
    let mut sent = 0;
    while out_rx.try_recv().is_ok() {
        sent += 1;
    }
    assert_eq!(sent, MAX_PENDING_TOOL_CALLS + 1);
}
