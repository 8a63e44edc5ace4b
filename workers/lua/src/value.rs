//! A cell's trailing values as one bundle for the host, under `VALUE_MIME`, sent before
//! their line once a host asked for them (Jupyter's gateway sets the global `VALUES_WANTED`):
//! the host keeps it for `execute_result` alone, and each costs a frame only it reads.

use super::{json, MAX_DISPLAY_BYTES};
use crate::runtime::Outbox;
use mlua::{Lua, MultiValue, Value};
use serde_json::{Map, Value as Json};

/// The key of the display bundle that carries the cell's trailing value (the host's
/// `VALUE_MIME`).
const VALUE_MIME: &str = "application/x-cellvisor-value";

/// The global a host sets to `true` to be sent the values' bundles.
const VALUES_WANTED: &str = "__cellvisor_send_values";

/// Sends the bundle of `values`, printed as `line`, if a host asked for it: its `text/plain`
/// is the line; one plain table is its `application/json` too.
pub(super) fn send_if_wanted(
    lua: &Lua,
    cell_id: u64,
    outbox: &Outbox,
    values: &MultiValue,
    line: &[u8],
) {
    let wanted = matches!(
        lua.globals().raw_get::<Value>(VALUES_WANTED),
        Ok(Value::Boolean(true))
    );
    if !wanted {
        return;
    }
    let text = String::from_utf8_lossy(line.strip_suffix(b"\n").unwrap_or(line));
    let mut bundle = Map::new();
    bundle.insert("text/plain".into(), Json::String(text.into_owned()));
    let mut each = values.iter();
    if let (Some(Value::Table(table)), None) = (each.next(), each.next()) {
        if let Some(json) = json::plain_table_json(table) {
            bundle.insert("application/json".into(), json);
        }
    }
    let mut sent = Map::new();
    sent.insert(VALUE_MIME.into(), Json::Object(bundle));
    let sent = Json::Object(sent).to_string();
    if sent.len() <= MAX_DISPLAY_BYTES {
        outbox.display(cell_id, sent);
    }
}
