//! `complete_request` and `inspect_request` answered from the live namespace: the name at
//! the cursor, and the small cell each language runs to list what it could complete to or
//! to describe it (Python's `rlcompleter` and `inspect`, JavaScript's property chains, Lua's
//! tables, compiled with `lua_load`, Lua's own `load`, which code mode's `load` shadows). The
//! cell prints one marked line of JSON, which [`answer`] reads back. Also the cell that asks a
//! worker for its values' bundles.

use cellvisor::Language;
use serde_json::Value;

/// The byte that starts the answer's line in a snippet's output.
const MARK: char = '\u{1e}';

/// The dotted name that ends at `cursor_pos` (in characters, as Jupyter counts them) and
/// where it starts (in characters too): what to complete or inspect.
pub fn name_at(code: &str, cursor_pos: usize) -> (usize, String) {
    let before: Vec<char> = code.chars().take(cursor_pos).collect();
    let mut start = before.len();
    while start > 0 {
        let c = before[start - 1];
        if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
            start -= 1;
        } else {
            break;
        }
    }
    let name: String = before[start..].iter().collect();
    // A leading dot or digit is no name to look up.
    let name = name
        .trim_start_matches(|c: char| c == '.' || c.is_ascii_digit())
        .to_string();
    (before.len() - name.chars().count(), name)
}

/// The cell that asks a worker of `language` for its cells' trailing values as bundles (for
/// `execute_result`): workers send them only when asked, as each costs a cell with a value
/// one more message, which only the gateway reads. It lasts as long as the worker.
pub fn send_values_code(language: Language) -> &'static str {
    match language {
        Language::Python => "__import__('cellvisor_prelude').send_values()",
        Language::JavaScript => {
            "Object.defineProperty(globalThis, '__cellvisorSendValues', \
             {value: true, writable: true, configurable: true}); undefined"
        }
        Language::Lua => "__cellvisor_send_values = true",
    }
}

/// The name under the cursor for `inspect_request`: the dotted name around it.
pub fn name_around(code: &str, cursor_pos: usize) -> String {
    let after: String = code
        .chars()
        .skip(cursor_pos)
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
        .collect();
    let (_, before) = name_at(code, cursor_pos);
    format!("{before}{after}").trim_end_matches('.').to_string()
}

/// The cell that prints the completions of `name` in `language`.
pub fn complete_code(language: Language, name: &str) -> String {
    let quoted = serde_json::to_string(name).unwrap_or_else(|_| "\"\"".into());
    match language {
        Language::Python => format!(
            "def __cellvisor_complete(t):\n    import json, rlcompleter\n    if not t:\n        \
             out = sorted(k for k in globals() if not k.startswith('_'))\n    else:\n        \
             c, out = rlcompleter.Completer(globals()), []\n        while len(out) < 200:\n            \
             m = c.complete(t, len(out))\n            if m is None:\n                break\n            \
             out.append(m.rstrip('('))\n    print('\\x1e' + json.dumps(out[:200]))\n\
             __cellvisor_complete({quoted})\ndel __cellvisor_complete\n"
        ),
        Language::JavaScript => format!(
            "(() => {{ const t = {quoted}; const i = t.lastIndexOf('.'); let base = globalThis, \
             head = '', pre = t; if (i >= 0) {{ head = t.slice(0, i + 1); pre = t.slice(i + 1); \
             try {{ base = (0, eval)(t.slice(0, i)); }} catch (e) {{ base = undefined; }} }} \
             const names = new Set(); for (let o = base; o !== null && o !== undefined; o = \
             Object.getPrototypeOf(o)) {{ for (const k of Object.getOwnPropertyNames(o)) \
             names.add(k); }} console.log('\\x1e' + JSON.stringify([...names].filter(k => \
             k.startsWith(pre) && /^[A-Za-z_$][\\w$]*$/.test(k)).sort().slice(0, 200).map(k => \
             head + k))); }})();\n"
        ),
        Language::Lua => format!(
            "do\n  local t = {quoted}\n  local head, pre = t:match('^(.*%.)([%w_]*)$')\n  \
             local base = _ENV\n  if head then\n    local f = (lua_load or load)('return ' .. head:sub(1, -2), \
             'complete', 't', _ENV)\n    local ok, v = pcall(f or function() end)\n    base = ok \
             and v or nil\n  else\n    head, pre = '', t\n  end\n  local out, seen = {{}}, {{}}\n  \
             local function add(tbl)\n    if type(tbl) ~= 'table' then return end\n    for k in \
             pairs(tbl) do\n      if type(k) == 'string' and not seen[k] and k:match('^[%a_][%w_]*$') \
             and k:sub(1, #pre) == pre then\n        seen[k] = true\n        out[#out + 1] = head .. k\n      \
             end\n    end\n  end\n  add(base)\n  if type(base) == 'table' or type(base) == 'string' then\n    \
             local mt = getmetatable(base)\n    if type(mt) == 'table' then add(mt.__index) end\n  \
             end\n  table.sort(out)\n  local parts = {{}}\n  for i, s in ipairs(out) do\n    if i > \
             200 then break end\n    parts[#parts + 1] = '\"' .. s .. '\"'\n  end\n  \
             print('\\30[' .. table.concat(parts, ',') .. ']')\nend\n"
        ),
    }
}

/// The cell that prints a description of `name` in `language` (its type, signature, value
/// and documentation), or JSON `null` when it names nothing.
pub fn inspect_code(language: Language, name: &str) -> String {
    let quoted = serde_json::to_string(name).unwrap_or_else(|_| "\"\"".into());
    match language {
        Language::Python => format!(
            "def __cellvisor_inspect(t):\n    import json, inspect\n    try:\n        \
             v = eval(t, globals())\n    except Exception:\n        print('\\x1e' + \
             json.dumps(None))\n        return\n    parts = ['Type: ' + type(v).__name__]\n    \
             try:\n        parts.append('Signature: ' + t + str(inspect.signature(v)))\n    except \
             Exception:\n        pass\n    parts.append('Value: ' + repr(v)[:2000])\n    doc = \
             inspect.getdoc(v)\n    if doc:\n        parts.append('Docstring:\\n' + doc)\n    \
             print('\\x1e' + json.dumps('\\n'.join(parts)))\n__cellvisor_inspect({quoted})\n\
             del __cellvisor_inspect\n"
        ),
        Language::JavaScript => format!(
            "(() => {{ let v; try {{ v = (0, eval)({quoted}); }} catch (e) {{ \
             console.log('\\x1e' + JSON.stringify(null)); return; }} let text; try {{ text = \
             typeof v === 'function' ? String(v) : JSON.stringify(v, null, 2); }} catch (e) {{}} \
             if (text === undefined) text = String(v); console.log('\\x1e' + JSON.stringify('Type: \
             ' + (v === null ? 'null' : typeof v) + '\\nValue: ' + text.slice(0, 2000))); }})();\n"
        ),
        Language::Lua => format!(
            "do\n  local f = (lua_load or load)('return ' .. {quoted}, 'inspect', 't', _ENV)\n  local ok, v = \
             pcall(f or function() error() end)\n  if not ok or v == nil then\n    print('\\30null')\n  \
             else\n    local text = ('Type: ' .. type(v) .. '\\nValue: ' .. tostring(v)):sub(1, 2000)\n    \
             text = text:gsub('[%c\"\\\\]', function(c) return string.format('\\\\u%04x', c:byte()) end)\n    \
             print('\\30\"' .. text .. '\"')\n  end\nend\n"
        ),
    }
}

/// A `complete_request` (its content) read: the cell that lists the completions, and where
/// the completed name starts and the cursor stands (what the reply says).
pub struct Completion {
    /// The snippet cell to run in the session.
    pub cell: String,
    start: usize,
    cursor: usize,
}

impl Completion {
    /// The completion `content` asks for in `language`.
    pub fn of(language: Language, content: &Value) -> Completion {
        let code = content["code"].as_str().unwrap_or_default();
        let cursor = cursor_of(code, content);
        let (start, name) = name_at(code, cursor);
        Completion {
            cell: complete_code(language, &name),
            start,
            cursor,
        }
    }

    /// The `complete_reply` content, from what the cell printed (`None`: it failed).
    pub fn reply(&self, answer: Option<Value>) -> Value {
        let matches: Vec<Value> = answer
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default();
        serde_json::json!({"status": "ok", "matches": matches, "cursor_start": self.start,
            "cursor_end": self.cursor, "metadata": {}})
    }
}

/// The cell that describes the name an `inspect_request` (its content) points at; `None`
/// when the cursor is on no name (then [`inspect_reply`] of `None` answers).
pub fn inspection_of(language: Language, content: &Value) -> Option<String> {
    let code = content["code"].as_str().unwrap_or_default();
    let name = name_around(code, cursor_of(code, content));
    (!name.is_empty()).then(|| inspect_code(language, &name))
}

/// The `inspect_reply` content, from what the inspection cell printed.
pub fn inspect_reply(answer: Option<Value>) -> Value {
    match answer {
        Some(Value::String(text)) => serde_json::json!({"status": "ok", "found": true,
            "data": {"text/plain": text}, "metadata": {}}),
        _ => serde_json::json!({"status": "ok", "found": false, "data": {}, "metadata": {}}),
    }
}

/// `cursor_pos` of a request, the end of its code when absent.
fn cursor_of(code: &str, content: &Value) -> usize {
    content["cursor_pos"]
        .as_u64()
        .map_or(code.chars().count(), |c| c as usize)
}

/// The JSON a snippet printed on its marked line, if it printed one.
pub fn answer(output: &str) -> Option<Value> {
    let line = output.lines().rev().find_map(|l| l.strip_prefix(MARK))?;
    serde_json::from_str(line.trim_end()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_at_the_cursor_is_the_dotted_name_before_it() {
        assert_eq!(name_at("x = os.pa", 9), (4, "os.pa".to_string()));
        assert_eq!(name_at("print(ab", 8), (6, "ab".to_string()));
        assert_eq!(name_at("1.5", 3), (3, String::new()));
        assert_eq!(name_at("f(", 2), (2, String::new()));
        assert_eq!(name_at("ünï = va", 8), (6, "va".to_string()));
        assert_eq!(name_around("len(xs)", 1), "len");
        assert_eq!(name_around("a.b.c + 1", 3), "a.b.c");
    }

    #[test]
    fn the_snippets_quote_the_name_and_answers_are_read_from_the_marked_line() {
        for language in Language::ALL {
            assert!(complete_code(language, "os.pa").contains("\"os.pa\""));
            assert!(inspect_code(language, "x").contains("\"x\""));
        }
        assert_eq!(
            answer("noise\n\u{1e}[\"a\", \"ab\"]\n"),
            Some(serde_json::json!(["a", "ab"]))
        );
        assert_eq!(answer("\u{1e}null\n"), Some(Value::Null));
        assert_eq!(answer("nothing marked\n"), None);
    }

    #[test]
    fn requests_are_read_and_answers_become_replies() {
        let ask = Completion::of(Language::Python, &serde_json::json!({"code": "x = os.pa"}));
        assert!(ask.cell.contains("\"os.pa\""));
        let reply = ask.reply(Some(serde_json::json!(["os.path"])));
        assert_eq!(
            (reply["cursor_start"].as_u64(), reply["cursor_end"].as_u64()),
            (Some(4), Some(9))
        );
        assert_eq!(reply["matches"], serde_json::json!(["os.path"]));
        assert_eq!(ask.reply(None)["matches"], serde_json::json!([]));
        let content = serde_json::json!({"code": "len(x)", "cursor_pos": 1});
        assert!(inspection_of(Language::Lua, &content).is_some_and(|c| c.contains("\"len\"")));
        assert_eq!(
            inspection_of(Language::Lua, &serde_json::json!({"code": "("})),
            None
        );
        assert_eq!(inspect_reply(Some("Type: int".into()))["found"], true);
        assert_eq!(inspect_reply(Some(Value::Null))["found"], false);
    }
}
