//! The MCP tools of state that survives: `checkpoint` and `restore` (an undo for agents:
//! checkpoint before a risky cell, restore after it failed), `checkpoints` and `names`, on
//! this connection's session.

use super::{request_error_message, tool_arguments, tool_error, CellvisorMcp};
use crate::render::ledger_line;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use serde_json::json;

use super::args::{CheckpointArgs, NamesArgs, NoArgs};
use super::tools::derived;

const CHECKPOINT_EXPECTED: &str = r#"{"name": string, "language"?: "py"|"js"|"lua"}"#;

impl CellvisorMcp {
    /// `checkpoint`: saves the namespace under a name.
    pub(super) async fn checkpoint(&self, arguments: JsonObject) -> CallToolResult {
        let args: CheckpointArgs = match tool_arguments(arguments, CHECKPOINT_EXPECTED) {
            Ok(args) => args,
            Err(refusal) => return refusal,
        };
        match self
            .cv
            .checkpoint(&self.session, args.language, &args.name)
            .await
        {
            Ok(saved) => text(
                saved
                    .iter()
                    .map(|c| {
                        format!(
                            "Saved checkpoint {:?} of {} ({} bytes).",
                            c.name, c.language, c.bytes
                        )
                    })
                    .collect(),
            ),
            Err(err) => tool_error(request_error_message(&err)),
        }
    }

    /// `restore`: replaces the namespace with a checkpoint's.
    pub(super) async fn restore(&self, arguments: JsonObject) -> CallToolResult {
        let args: CheckpointArgs = match tool_arguments(arguments, CHECKPOINT_EXPECTED) {
            Ok(args) => args,
            Err(refusal) => return refusal,
        };
        match self
            .cv
            .restore(&self.session, args.language, &args.name)
            .await
        {
            Ok(restored) => text(
                restored
                    .iter()
                    .map(|r| format!("{}: {}.", r.language, ledger_line(&r.ledger)))
                    .collect(),
            ),
            Err(err) => tool_error(request_error_message(&err)),
        }
    }

    /// `checkpoints`: the session's checkpoints.
    pub(super) async fn checkpoints(&self) -> CallToolResult {
        match self.cv.checkpoints(&self.session).await {
            Ok(rows) if rows.is_empty() => text(vec!["No checkpoints yet.".into()]),
            Ok(rows) => text(
                rows.iter()
                    .map(|c| {
                        format!(
                            "{} {} ({} bytes, {})",
                            c.language, c.name, c.bytes, c.taken_at
                        )
                    })
                    .collect(),
            ),
            Err(err) => tool_error(request_error_message(&err)),
        }
    }

    /// `names`: the namespace's user names and whether a snapshot keeps each.
    pub(super) async fn names(&self, arguments: JsonObject) -> CallToolResult {
        let args: NamesArgs = match tool_arguments(arguments, r#"{"language": "py"|"js"|"lua"}"#) {
            Ok(args) => args,
            Err(refusal) => return refusal,
        };
        match self.cv.names(&self.session, args.language).await {
            Ok(listed) if listed.names.is_empty() => {
                text(vec![format!("No names of its own in {}.", listed.language)])
            }
            Ok(listed) => text(
                listed
                    .names
                    .iter()
                    .map(|n| {
                        let kept = if n.saveable {
                            "kept by a snapshot"
                        } else {
                            "NOT kept by a snapshot"
                        };
                        let note = n
                            .note
                            .as_deref()
                            .map(|t| format!(": {t}"))
                            .unwrap_or_default();
                        format!("{} ({}) {kept}{note}", n.name, n.kind)
                    })
                    .collect(),
            ),
            Err(err) => tool_error(request_error_message(&err)),
        }
    }
}

fn text(lines: Vec<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(lines.join("\n"))])
}

/// The four tools as the client lists them.
pub(super) fn state_tools() -> Vec<Tool> {
    let language = json!({"type": "string", "enum": ["py", "js", "lua"]});
    let mut checkpoint_schema = derived::<CheckpointArgs>();
    checkpoint_schema["properties"]["name"]["pattern"] =
        json!("^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$");
    let description = checkpoint_schema["properties"]["language"]["description"].take();
    checkpoint_schema["properties"]["language"] = language.clone();
    checkpoint_schema["properties"]["language"]["description"] = description;
    let mut names_schema = derived::<NamesArgs>();
    let description = names_schema["properties"]["language"]["description"].take();
    names_schema["properties"]["language"] = language;
    names_schema["properties"]["language"]["description"] = description;
    let empty = derived::<NoArgs>();
    let writes = ToolAnnotations::new()
        .read_only(false)
        .destructive(true)
        .idempotent(true)
        .open_world(false);
    let reads = ToolAnnotations::new().read_only(true).open_world(false);
    vec![
        Tool::new(
            "checkpoint",
            "Save the state (variables, functions, imports) of this connection's runtimes under a \
             name: one language, or every language with state. Restore it later with `restore` \
             (an undo: checkpoint before a risky cell, restore if it broke things).",
            super::tools::schema(checkpoint_schema.clone()),
        )
        .with_title("Checkpoint state")
        .with_annotations(writes.clone()),
        Tool::new(
            "restore",
            "Replace the state of this connection's runtimes with a checkpoint saved by \
             `checkpoint`; answers which names came back and which could not.",
            super::tools::schema(checkpoint_schema.clone()),
        )
        .with_title("Restore a checkpoint")
        .with_annotations(writes),
        Tool::new(
            "checkpoints",
            "List this connection's checkpoints with their sizes and times.",
            super::tools::schema(empty),
        )
        .with_title("List checkpoints")
        .with_annotations(reads.clone()),
        Tool::new(
            "names",
            "List the variables, functions and modules a runtime holds, with their types, sizes \
             and whether a snapshot (eviction, restart) would keep each.",
            super::tools::schema(names_schema),
        )
        .with_title("List names")
        .with_annotations(reads),
    ]
}
