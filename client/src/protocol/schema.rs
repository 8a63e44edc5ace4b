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
    // What a client sends is read by the daemon (fields with defaults may be left out); what
    // the daemon sends is written by it (fields are there unless skipped when empty).
    let mut requests = SchemaSettings::draft2020_12()
        .for_deserialize()
        .into_generator();
    let mut answers = SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator();
    let mut methods = Map::new();
    for name in MethodName::ALL {
        let params = name
            .params_schema(&mut requests)
            .map_or(Value::Null, |schema| schema.to_value());
        let result = name.result_schema(&mut answers).to_value();
        methods.insert(
            name.as_str().to_string(),
            json!({"params": params, "result": result}),
        );
    }
    let event = answers.subschema_for::<CellEvent>().to_value();
    let tool_call = answers.subschema_for::<ToolCallParams>().to_value();
    let error = answers.subschema_for::<RpcError>().to_value();
    let mismatch = answers.subschema_for::<VersionMismatch>().to_value();
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
    let mut defs: Map<String, Value> = answers.take_definitions(true).into_iter().collect();
    for schema in defs.values_mut() {
        absent_not_null(schema);
    }
    for method in methods.values_mut() {
        absent_not_null(&mut method["result"]);
    }
    for (name, schema) in requests.take_definitions(true) {
        match defs.get(&name) {
            Some(written) if *written != schema => {
                // Not expected of the protocol's types; kept visible rather than lost.
                defs.insert(format!("{name}Read"), schema);
            }
            Some(_) => {}
            None => {
                defs.insert(name, schema);
            }
        }
    }
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

/// What the daemon writes leaves an empty `Option` out (`skip_serializing_if`) rather than
/// writing `null`: in the schemas of its answers, a property that may be absent is not also
/// `null`. (Properties always written keep their `null`.)
fn absent_not_null(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            let required: Vec<Value> = map
                .get("required")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if let Some(Value::Object(properties)) = map.get_mut("properties") {
                for (name, property) in properties.iter_mut() {
                    if !required.contains(&Value::String(name.clone())) {
                        drop_null(property);
                    }
                }
            }
            map.values_mut().for_each(absent_not_null);
        }
        Value::Array(items) => items.iter_mut().for_each(absent_not_null),
        _ => {}
    }
}

/// `schema` without its `null` alternative (`"type": [T, "null"]` or `anyOf: [T, null]`).
fn drop_null(schema: &mut Value) {
    let null = json!({"type": "null"});
    if let Some(Value::Array(types)) = schema.get_mut("type") {
        types.retain(|t| t != "null");
        if types.len() == 1 {
            let only = types[0].clone();
            schema["type"] = only;
        }
    }
    if let Some(Value::Array(alternatives)) = schema.get_mut("anyOf") {
        alternatives.retain(|a| *a != null);
        if alternatives.len() == 1 {
            let only = alternatives.remove(0);
            if let (Value::Object(outer), Value::Object(inner)) = (&mut *schema, only) {
                outer.remove("anyOf");
                outer.extend(inner);
            }
        }
    }
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
