//! Host tools as every language shows them (code mode): the `ALL_TOOLS` entries with their
//! TypeScript declaration, the JavaScript identifier a tool is reachable under, and the
//! ranking behind `tools.tool_search`.
//!
//! A tool's name may hold `-` and `.` (`list-dir`, `github.search_issues`, as MCP servers name
//! them); its *identifier* replaces every character that cannot be in a JavaScript
//! identifier with `_` (`list_dir`, `github_search_issues`), so `tools.list_dir(...)` works
//! where `tools["list-dir"](...)` always does.

use cellvisor_ipc::ToolInfo;
use serde_json::{json, Map, Value};

/// How many tools `tool_search` returns when the query gives no `limit`.
pub const DEFAULT_SEARCH_LIMIT: usize = 8;

/// The cell's tools as every language shows them in `ALL_TOOLS`: a JSON array of
/// `{name, description, declaration, input_schema}`. A schema that is not JSON still reaches
/// the cell, as its text.
pub fn all_tools_json(tools: &[ToolInfo]) -> Value {
    tools
        .iter()
        .map(|tool| {
            let schema = serde_json::from_str(&tool.input_schema_json)
                .unwrap_or_else(|_| Value::String(tool.input_schema_json.clone()));
            json!({
                "name": tool.name,
                "description": tool.description,
                "declaration": declaration(&tool.name, &schema),
                "input_schema": schema,
            })
        })
        .collect()
}

/// The JavaScript identifier for a tool name: each character that cannot be in an
/// identifier becomes `_` (and a leading digit is prefixed with `_`).
pub fn identifier(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '$' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// `declare function list_dir(args: { path: string; depth?: number }): Promise<unknown>;`
pub fn declaration(name: &str, input_schema: &Value) -> String {
    format!(
        "declare function {}(args: {}): Promise<unknown>;",
        identifier(name),
        typescript(input_schema)
    )
}

/// A TypeScript type for a JSON Schema. What TypeScript cannot say (formats, ranges,
/// patterns) is left out; what the schema does not constrain is `unknown`.
pub fn typescript(schema: &Value) -> String {
    let Value::Object(map) = schema else {
        return match schema {
            Value::Bool(false) => "never".into(),
            _ => "unknown".into(),
        };
    };
    if let Some(value) = map.get("const") {
        return value.to_string();
    }
    if let Some(Value::Array(values)) = map.get("enum") {
        if !values.is_empty() {
            return union(values.iter().map(Value::to_string));
        }
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(variants)) = map.get(key) {
            if !variants.is_empty() {
                return union(variants.iter().map(typescript));
            }
        }
    }
    if let Some(Value::Array(parts)) = map.get("allOf") {
        if !parts.is_empty() {
            return parts
                .iter()
                .map(|part| parenthesized(typescript(part)))
                .collect::<Vec<_>>()
                .join(" & ");
        }
    }
    match map.get("type") {
        Some(Value::String(kind)) => typed(map, kind),
        Some(Value::Array(kinds)) if !kinds.is_empty() => union(
            kinds
                .iter()
                .filter_map(Value::as_str)
                .map(|k| typed(map, k)),
        ),
        _ if map.contains_key("properties") => object(map),
        _ if map.contains_key("items") => array(map),
        _ => "unknown".into(),
    }
}

fn typed(map: &Map<String, Value>, kind: &str) -> String {
    match kind {
        "string" => "string".into(),
        "number" | "integer" => "number".into(),
        "boolean" => "boolean".into(),
        "null" => "null".into(),
        "array" => array(map),
        "object" => object(map),
        _ => "unknown".into(),
    }
}

fn union(parts: impl Iterator<Item = String>) -> String {
    let mut seen: Vec<String> = Vec::new();
    for part in parts {
        if !seen.contains(&part) {
            seen.push(part);
        }
    }
    seen.join(" | ")
}

/// A union or intersection inside another type needs parentheses.
fn parenthesized(ts: String) -> String {
    if ts.contains(" | ") || ts.contains(" & ") {
        format!("({ts})")
    } else {
        ts
    }
}

fn array(map: &Map<String, Value>) -> String {
    match map.get("items") {
        Some(items) => format!("{}[]", parenthesized(typescript(items))),
        None => "unknown[]".into(),
    }
}

/// `{ path: string; depth?: number }`: required properties first, in the order the schema
/// lists them as required, then the optional ones by name.
fn object(map: &Map<String, Value>) -> String {
    let empty = Map::new();
    let properties = match map.get("properties") {
        Some(Value::Object(properties)) => properties,
        _ => &empty,
    };
    let required: Vec<&str> = match map.get("required") {
        Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let mut fields = Vec::new();
    for name in &required {
        if let Some(schema) = properties.get(*name) {
            fields.push(format!("{}: {}", property_name(name), typescript(schema)));
        }
    }
    for (name, schema) in properties {
        if !required.contains(&name.as_str()) {
            fields.push(format!("{}?: {}", property_name(name), typescript(schema)));
        }
    }
    match map.get("additionalProperties") {
        Some(Value::Bool(false)) => {}
        Some(Value::Object(_)) => {
            let rest = map.get("additionalProperties").map(typescript);
            fields.push(format!(
                "[key: string]: {}",
                rest.unwrap_or_else(|| "unknown".into())
            ));
        }
        _ if properties.is_empty() => fields.push("[key: string]: unknown".into()),
        _ => {}
    }
    if fields.is_empty() {
        "{}".into()
    } else {
        format!("{{ {} }}", fields.join("; "))
    }
}

fn property_name(name: &str) -> String {
    if !name.is_empty() && identifier(name) == name {
        name.to_string()
    } else {
        Value::String(name.to_string()).to_string()
    }
}

/// Why `tool_search` refused its arguments; the texts are the code-mode API's own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SearchError {
    /// An empty query would match everything.
    #[error("query must not be empty")]
    EmptyQuery,
    /// A limit of 0 would return nothing.
    #[error("limit must be greater than zero")]
    BadLimit,
}

/// `tools.tool_search({query, limit?})`: the declared tools that match `query`, best first,
/// as `{tools: [{name, description}]}`. Exact identifier matches (the name or its
/// identifier, ignoring case) come first; then tools ranked by how many of the query's
/// words they contain, words in the name counting more than words in the description; ties
/// keep the order the tools were declared in.
pub fn search(tools: &[ToolInfo], query: &str, limit: Option<f64>) -> Result<Value, SearchError> {
    let query = query.trim();
    if query.is_empty() {
        return Err(SearchError::EmptyQuery);
    }
    let limit = match limit {
        None => DEFAULT_SEARCH_LIMIT,
        Some(limit) if limit.is_finite() && limit >= 1.0 && limit.fract() == 0.0 => {
            limit.min(usize::MAX as f64) as usize
        }
        Some(_) => return Err(SearchError::BadLimit),
    };
    let wanted = query.to_ascii_lowercase();
    let terms = words(query);
    let mut ranked: Vec<(u32, usize, &ToolInfo)> = tools
        .iter()
        .enumerate()
        .filter_map(|(order, tool)| {
            let exact = tool.name.to_ascii_lowercase() == wanted
                || identifier(&tool.name).to_ascii_lowercase() == wanted;
            let score = if exact {
                u32::MAX
            } else {
                lexical_score(&terms, tool)
            };
            (score > 0).then_some((score, order, tool))
        })
        .collect();
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let found: Vec<Value> = ranked
        .into_iter()
        .take(limit)
        .map(|(_, _, tool)| json!({"name": tool.name, "description": tool.description}))
        .collect();
    Ok(json!({ "tools": found }))
}

/// Words in the name count three times what words in the description do; a word that only
/// shares a stem with a query word (`issue` for `issues`) counts half.
fn lexical_score(terms: &[String], tool: &ToolInfo) -> u32 {
    let name_words = words(&tool.name);
    let description_words = words(&tool.description);
    let mut score = 0;
    for term in terms {
        score += 3 * word_match(term, &name_words) + word_match(term, &description_words);
    }
    score
}

/// 2 when `term` is one of `words`, 1 when one of them and `term` start alike (the shorter,
/// of at least 3 characters, begins the longer), else 0.
fn word_match(term: &str, words: &[String]) -> u32 {
    if words.iter().any(|word| word == term) {
        return 2;
    }
    let stem = |word: &str| {
        let (short, long) = if word.len() < term.len() {
            (word, term)
        } else {
            (term, word)
        };
        short.len() >= 3 && long.starts_with(short)
    };
    u32::from(words.iter().any(|word| stem(word)))
}

/// Lower-case words: split on anything not alphanumeric and between a lower-case letter
/// and an upper-case one (`searchIssues` is `search`, `issues`).
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut previous_lower = false;
    for c in text.chars() {
        if !c.is_alphanumeric() {
            if !current.is_empty() {
                out.push(std::mem::take(&mut current));
            }
            previous_lower = false;
            continue;
        }
        if c.is_uppercase() && previous_lower && !current.is_empty() {
            out.push(std::mem::take(&mut current));
        }
        previous_lower = c.is_lowercase() || c.is_ascii_digit();
        current.extend(c.to_lowercase());
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, description: &str, schema: Value) -> ToolInfo {
        ToolInfo {
            name: name.into(),
            description: description.into(),
            input_schema_json: schema.to_string(),
        }
    }

    #[test]
    fn declarations_follow_the_schema() {
        let schema = json!({"type": "object",
            "properties": {"depth": {"type": "integer"}, "path": {"type": "string"}},
            "required": ["path"]});
        assert_eq!(
            declaration("list-dir", &schema),
            "declare function list_dir(args: { path: string; depth?: number }): Promise<unknown>;"
        );
        assert_eq!(
            typescript(&json!({"type": "object", "properties": {
                "mode": {"enum": ["a", "b"]},
                "tags": {"type": "array", "items": {"type": ["string", "null"]}},
                "odd-key": {"type": "boolean"}}})),
            "{ mode?: \"a\" | \"b\"; \"odd-key\"?: boolean; tags?: (string | null)[] }"
        );
        assert_eq!(
            typescript(&json!({"type": "object"})),
            "{ [key: string]: unknown }"
        );
        assert_eq!(typescript(&json!("not a schema")), "unknown");
        assert_eq!(identifier("github.search_issues"), "github_search_issues");
        assert_eq!(identifier("3d"), "_3d");
    }

    #[test]
    fn search_ranks_exact_identifiers_then_words() {
        let tools = [
            tool("list-dir", "Lists a directory", json!({})),
            tool(
                "issue_tracker_status",
                "Whether the tracker is up",
                json!({}),
            ),
            tool(
                "github.search_issues",
                "Searches issues on GitHub",
                json!({}),
            ),
            tool("notes", "Mentions issues in passing", json!({})),
        ];
        let names = |found: Value| -> Vec<String> {
            found["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| t["name"].as_str().unwrap_or_default().to_string())
                .collect()
        };
        assert_eq!(
            names(search(&tools, "issues", None).expect("search")),
            ["github.search_issues", "issue_tracker_status", "notes"]
        );
        assert_eq!(
            names(search(&tools, "list_dir", Some(1.0)).expect("search")),
            ["list-dir"]
        );
        assert_eq!(search(&tools, "  ", None), Err(SearchError::EmptyQuery));
        for bad in [0.0, -1.0, 1.5, f64::NAN] {
            assert_eq!(search(&tools, "x", Some(bad)), Err(SearchError::BadLimit));
        }
        assert_eq!(
            SearchError::BadLimit.to_string(),
            "limit must be greater than zero"
        );
    }
}
