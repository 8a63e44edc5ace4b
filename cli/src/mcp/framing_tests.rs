//! The classification of `cellvisor mcp`'s input lines, as plain data.

use super::*;

/// What a line should become: `Pass`, `Skip`, `Ignore`, or an answer with `code`, the
/// answer's `id` as JSON text, and a part of its message.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    Pass,
    Skip,
    Ignore,
    Answer(i64, &'static str, &'static str),
}

use Expect::{Answer, Ignore, Pass, Skip};

const PARSE: i64 = code::PARSE_ERROR;
const REQUEST: i64 = code::INVALID_REQUEST;
const PARAMS: i64 = code::INVALID_PARAMS;

const CASES: &[(&[u8], Expect)] = &[
    // Well-formed messages go to rmcp, unknown methods included (it answers those -32601).
    (br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#, Pass),
    (br#"{"jsonrpc":"2.0","id":"a","method":"tools/list","params":{}}"#, Pass),
    (
        br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"eval","arguments":{}}}"#,
        Pass,
    ),
    (br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"eval"}}"#, Pass),
    (br#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#, Pass),
    (br#"{"jsonrpc":"2.0","id":5,"method":"no/such/method"}"#, Pass),
    (br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#, Pass),
    (br#"{"jsonrpc":"2.0","id":"s-1","result":{}}"#, Pass),
    (b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"ping\"}\r", Pass),
    (b"", Skip),
    (b"  \t\r", Skip),
    // Not JSON, not UTF-8.
    (b"hello", Answer(PARSE, "null", "parse error")),
    (br#"{"jsonrpc":"2.0","id":7,"method":"ping""#, Answer(PARSE, "null", "parse error")),
    (
        b"{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"\xff\"}",
        Answer(PARSE, "null", "not UTF-8 (an invalid byte at offset 34)"),
    ),
    (b"\xc3\x28", Answer(PARSE, "null", "not UTF-8")),
    // JSON, but not a JSON-RPC request.
    (
        br#"{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}"#,
        Answer(REQUEST, "null", "id must be a string, a number or null"),
    ),
    (
        br#"{"jsonrpc":"2.0","id":[1],"method":"tools/list"}"#,
        Answer(REQUEST, "null", "id must be"),
    ),
    (
        br#"{"jsonrpc":"2.0","id":true,"method":"tools/list"}"#,
        Answer(REQUEST, "null", "id must be"),
    ),
    (
        br#"{"jsonrpc":"2.0","id":null,"method":"tools/list"}"#,
        Answer(REQUEST, "null", "not null"),
    ),
    (
        br#"{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}"#,
        Answer(REQUEST, "1.5", "not 1.5"),
    ),
    (br#"{"jsonrpc":"2.0","id":9}"#, Answer(REQUEST, "9", "`method`")),
    (br#"{"jsonrpc":"2.0","id":"x"}"#, Answer(REQUEST, "\"x\"", "`method`")),
    (
        br#"{"jsonrpc":"1.0","id":10,"method":"tools/list"}"#,
        Answer(REQUEST, "10", "jsonrpc must be \"2.0\""),
    ),
    (
        br#"{"id":11,"method":"tools/list"}"#,
        Answer(REQUEST, "11", "`jsonrpc`"),
    ),
    (
        br#"{"jsonrpc":"2.0","id":12,"method":7}"#,
        Answer(REQUEST, "12", "invalid request"),
    ),
    (br#"{"foo":"boo"}"#, Answer(REQUEST, "null", "invalid request: missing field")),
    (br#"{"jsonrpc":"2.0","method":1}"#, Answer(REQUEST, "null", "invalid request")),
    (b"[]", Answer(REQUEST, "null", "invalid request")),
    (b"42", Answer(REQUEST, "null", "invalid request")),
    (br#""tools/list""#, Answer(REQUEST, "null", "invalid request")),
    // Params of the wrong shape.
    (
        br#"{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"arguments":{}}}"#,
        Answer(PARAMS, "13", "missing field `name`; tools/call takes {\"name\""),
    ),
    (
        br#"{"jsonrpc":"2.0","id":14,"method":"tools/call"}"#,
        Answer(PARAMS, "14", "params are missing"),
    ),
    (
        br#"{"jsonrpc":"2.0","id":15,"method":"tools/call","params":"eval"}"#,
        Answer(PARAMS, "15", "params must be an object"),
    ),
    (
        br#"{"jsonrpc":"2.0","id":16,"method":"tools/call","params":{"name":"eval","arguments":5}}"#,
        Answer(PARAMS, "16", "invalid type: integer `5`"),
    ),
    (
        br#"{"jsonrpc":"2.0","id":17,"method":"tools/list","params":[1]}"#,
        Answer(PARAMS, "17", "params must be an object"),
    ),
    (
        br#"{"jsonrpc":"2.0","id":18,"method":"initialize","params":{}}"#,
        Answer(PARAMS, "18", "initialize takes"),
    ),
    (
        br#"{"jsonrpc":"2.0","id":20,"method":"resources/read","params":{}}"#,
        Answer(PARAMS, "20", "missing field `uri`; resources/read takes {\"uri\": string}"),
    ),
    (
        br#"{"jsonrpc":"2.0","id":21,"method":"resources/read","params":{"uri":"cellvisor://artifact/x"}}"#,
        Pass,
    ),
    (br#"{"jsonrpc":"2.0","id":22,"method":"resources/list"}"#, Pass),
    // Malformed notifications and responses: logged, not answered.
    (br#"{"jsonrpc":"1.0","method":"notifications/initialized"}"#, Ignore),
    (br#"{"method":"notifications/initialized"}"#, Ignore),
    (br#"{"jsonrpc":"2.0","id":{"a":1},"result":{}}"#, Ignore),
    (br#"{"jsonrpc":"2.0","id":19,"result":{},"error":{}}"#, Ignore),
];

fn judged(verdict: &Verdict) -> String {
    match verdict {
        Verdict::Pass(_) => "pass".into(),
        Verdict::Skip => "skip".into(),
        Verdict::Ignore(_) => "ignore".into(),
        Verdict::Answer { id, error } => format!("{} {id} {}", error.code, error.message),
    }
}

/// How `line` was judged if not as expected.
fn misjudged(line: &[u8], expect: Expect) -> Option<String> {
    let verdict = classify(line);
    let ok = match (expect, &verdict) {
        (Pass, Verdict::Pass(_)) | (Skip, Verdict::Skip) | (Ignore, Verdict::Ignore(_)) => true,
        (Answer(code, id, part), Verdict::Answer { id: got, error }) => {
            error.code == code
                && *got == serde_json::from_str::<Value>(id).unwrap()
                && error.message.contains(part)
        }
        _ => false,
    };
    let shown = String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned();
    (!ok).then(|| format!("{shown}: expected {expect:?}, got {}", judged(&verdict)))
}

fn check(line: &[u8], expect: Expect) {
    if let Some(wrong) = misjudged(line, expect) {
        panic!("{wrong}");
    }
}

#[test]
fn every_line_is_passed_on_skipped_ignored_or_answered() {
    let wrong: Vec<String> = CASES
        .iter()
        .filter_map(|(line, expect)| misjudged(line, *expect))
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn nesting_past_the_recursion_limit_is_a_parse_error() {
    check(&[b'['; 100_000], Answer(PARSE, "null", "recursion limit"));
    let deep_params = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    check(
        deep_params.as_bytes(),
        Answer(PARSE, "null", "recursion limit"),
    );
}

#[test]
fn an_over_long_line_is_refused_with_its_id_when_its_head_has_it() {
    let refusal = |head: &[u8]| judged(&too_long(20_000_000, head));
    let message = "request too large: 20000000 bytes, the limit is 16 MiB";
    assert_eq!(
        refusal(br#"{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"ev"#),
        format!("-32600 41 {message}")
    );
    assert_eq!(
        refusal(br#"{"id":"big","jsonrpc":"2.0""#),
        format!("-32600 \"big\" {message}")
    );
    // The id comes after the cut, is not an id, or there is no JSON to read.
    for head in [
        &br#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"eval","argu"#[..],
        br#"{"jsonrpc":"2.0","id":{"a":1},"method""#,
        b"aaaaaaaaaaaaaaaa",
        b"",
    ] {
        assert_eq!(refusal(head), format!("-32600 null {message}"));
    }
}
