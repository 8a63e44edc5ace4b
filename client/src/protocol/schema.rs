//! The JSON Schema of the whole protocol, generated from the Rust types the daemon reads and
//! writes: every method's params and result, the notifications and the daemon's own request,
//! the error object and its codes. `cellvisor protocol schema` prints it; the checked-in
//! `clients/schema/protocol.json` is it, and the clients' wire types are generated from that.

use super::{
    code, method, MethodName, RpcError, ToolCallParams, VersionMismatch, PROTOCOL_VERSION,
};
use crate::cell::CellEvent;
use schemars::generate::SchemaSettings;
use serde_json::{json, Map, Value};

/// The protocol's schema document: `methods` (params and result of each, by name),
/// `notifications` and `server_requests` (what the daemon sends), `errors` (each code's name,
/// value and meaning), `error` (the error object) and the types in `$defs`.
pub fn document() -> Value {
    let mut generator = SchemaSettings::draft2020_12().into_generator();
    let mut methods = Map::new();
    for name in MethodName::ALL {
        let params = name
            .params_schema(&mut generator)
            .map_or(Value::Null, |schema| schema.to_value());
        let result = name.result_schema(&mut generator).to_value();
        methods.insert(
            name.as_str().to_string(),
            json!({"params": params, "result": result}),
        );
    }
    let event = generator.subschema_for::<CellEvent>().to_value();
    let tool_call = generator.subschema_for::<ToolCallParams>().to_value();
    let error = generator.subschema_for::<RpcError>().to_value();
    let mismatch = generator.subschema_for::<VersionMismatch>().to_value();
    let errors: Map<String, Value> = code::ALL
        .iter()
        .map(|(name, value, doc)| {
            let about = doc.lines().map(str::trim).collect::<Vec<_>>().join(" ");
            (
                (*name).to_string(),
                json!({"code": value, "description": about}),
            )
        })
        .collect();
    let defs: Map<String, Value> = generator.take_definitions(true).into_iter().collect();
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "cellvisor JSON-RPC protocol",
        "description": "Generated from the Rust types by `cellvisor protocol schema`; do not edit.",
        "protocol_version": PROTOCOL_VERSION,
        "methods": methods,
        "notifications": {
            method::EVAL_EVENT: {
                "description": "An event of a running cell: the `request_id` of its request and the event's fields.",
                "params": {
                    "allOf": [
                        {
                            "type": "object",
                            "properties": {"request_id": {"description": "The id of the request (`eval` or `wait`) the event belongs to."}},
                            "required": ["request_id"],
                        },
                        event,
                    ]
                },
            },
        },
        "server_requests": {
            method::TOOL_CALL: {"params": tool_call, "result": {"description": "The tool's result, any JSON."}},
        },
        "error": error,
        "error_data": {"PROTOCOL_MISMATCH": mismatch},
        "errors": errors,
        "$defs": defs,
    })
}

/// The document as the checked-in file holds it: pretty JSON and a final newline.
pub fn document_text() -> String {
    let mut text = serde_json::to_string_pretty(&document()).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_has_its_params_and_result_and_every_ref_resolves() {
        let doc = document();
        let methods = doc["methods"].as_object().unwrap();
        assert_eq!(methods.len(), MethodName::ALL.len());
        assert!(methods["eval"]["params"]["$ref"].is_string());
        assert!(methods["status"]["params"].is_null());
        assert_eq!(doc["errors"]["METHOD_NOT_FOUND"]["code"], -32601);
        let text = document_text();
        for piece in text.split("\"$ref\": \"#/$defs/").skip(1) {
            let name = piece.split('"').next().unwrap();
            assert!(doc["$defs"].get(name).is_some(), "{name} is not defined");
        }
    }
}
