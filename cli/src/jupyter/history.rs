//! What a kernel answers `history_request` with: the code of the cells it ran, the last
//! [`History::KEPT`] of them, so a kernel that runs for weeks keeps a bounded memory. The
//! three access types Jupyter clients ask for (`tail`, `range`, `search`) are read here.

use serde_json::{json, Value};
use std::collections::VecDeque;

/// (execution count, code) of the last [`History::KEPT`] cells a kernel ran.
#[derive(Debug, Default)]
pub struct History(VecDeque<(u64, String)>);

/// The session number the entries carry: one kernel's history is one session of it.
const SESSION: u64 = 0;

impl History {
    /// How many cells are remembered.
    pub const KEPT: usize = 1000;

    /// Records a cell, forgetting the oldest past [`History::KEPT`].
    pub fn remember(&mut self, count: u64, code: &str) {
        if self.0.len() >= Self::KEPT {
            self.0.pop_front();
        }
        self.0.push_back((count, code.to_string()));
    }

    /// The `history` of a `history_reply` to `request` (its content): `tail` (the last `n`),
    /// `range` (lines `start` up to `stop`, exclusive, of this session), `search` (`pattern`
    /// as a glob with `*` and `?`, the last `n` matches, `unique` dropping repeats), and
    /// everything when the access type is absent. With `output: true` each source comes with
    /// its output, which this kernel does not keep (`null`).
    pub fn answer(&self, request: &Value) -> Vec<Value> {
        let n = request["n"].as_u64().map(|n| n as usize);
        let selected: Vec<&(u64, String)> = match request["hist_access_type"].as_str() {
            Some("tail") => last(self.0.iter().collect(), n),
            Some("range") => {
                let start = request["start"].as_u64().unwrap_or(0);
                let stop = request["stop"].as_u64().unwrap_or(u64::MAX);
                self.0
                    .iter()
                    .filter(|(line, _)| *line >= start && *line < stop)
                    .collect()
            }
            Some("search") => {
                let pattern = request["pattern"].as_str().unwrap_or("*");
                let mut found: Vec<&(u64, String)> = self
                    .0
                    .iter()
                    .filter(|(_, code)| glob(pattern, code))
                    .collect();
                if request["unique"].as_bool().unwrap_or(false) {
                    let mut seen = std::collections::HashSet::new();
                    found.reverse();
                    found.retain(|(_, code)| seen.insert(code.as_str()));
                    found.reverse();
                }
                last(found, n)
            }
            _ => self.0.iter().collect(),
        };
        let with_output = request["output"].as_bool().unwrap_or(false);
        selected
            .into_iter()
            .map(|item| match with_output {
                true => json!([SESSION, item.0, [item.1, Value::Null]]),
                false => entry(item),
            })
            .collect()
    }
}

fn entry((line, code): &(u64, String)) -> Value {
    json!([SESSION, line, code])
}

fn last<T>(mut items: Vec<T>, n: Option<usize>) -> Vec<T> {
    if let Some(n) = n {
        let skip = items.len().saturating_sub(n);
        items.drain(..skip);
    }
    items
}

/// Whether `text` matches the glob `pattern` (`*` any run, `?` one character), as IPython's
/// history search reads its pattern.
fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_cells_are_forgotten_past_the_bound() {
        let mut history = History::default();
        for n in 1..=(History::KEPT as u64 + 2) {
            history.remember(n, &format!("x = {n}"));
        }
        let reply = history.answer(&json!({}));
        assert_eq!(reply.len(), History::KEPT);
        assert_eq!(reply[0], json!([0, 3, "x = 3"]));
    }

    #[test]
    fn tail_range_and_search_select_as_jupyter_asks() {
        let mut history = History::default();
        for (n, code) in ["a = 1", "print(a)", "a = 1", "b = 2"].iter().enumerate() {
            history.remember(n as u64 + 1, code);
        }
        let ask = |request: Value| history.answer(&request);
        assert_eq!(
            ask(json!({"hist_access_type": "tail", "n": 2})),
            vec![json!([0, 3, "a = 1"]), json!([0, 4, "b = 2"])]
        );
        assert_eq!(
            ask(json!({"hist_access_type": "range", "start": 2, "stop": 3})),
            vec![json!([0, 2, "print(a)"])]
        );
        assert_eq!(
            ask(json!({"hist_access_type": "search", "pattern": "a*"})).len(),
            2
        );
        assert_eq!(
            ask(json!({"hist_access_type": "search", "pattern": "a*", "unique": true})),
            vec![json!([0, 3, "a = 1"])]
        );
        assert_eq!(
            ask(json!({"hist_access_type": "search", "pattern": "?rint*", "n": 5})),
            vec![json!([0, 2, "print(a)"])]
        );
        assert_eq!(
            ask(json!({"hist_access_type": "tail", "n": 1, "output": true})),
            vec![json!([0, 4, ["b = 2", null]])]
        );
        assert_eq!(ask(json!({})).len(), 4);
        assert!(!glob("a", "ab") && glob("*", "") && glob("a*b?", "axxbc"));
    }
}
