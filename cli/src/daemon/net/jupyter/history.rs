//! What a kernel answers `history_request` with: the code of the cells it ran, the last
//! [`History::KEPT`] of them, so a kernel that runs for weeks keeps a bounded memory.

use serde_json::{json, Value};
use std::collections::VecDeque;

/// (execution count, code) of the last [`History::KEPT`] cells a kernel ran.
#[derive(Debug, Default)]
pub(super) struct History(VecDeque<(u64, String)>);

impl History {
    /// How many cells are remembered.
    pub(super) const KEPT: usize = 1000;

    /// Records a cell, forgetting the oldest past [`History::KEPT`].
    pub(super) fn remember(&mut self, count: u64, code: &str) {
        if self.0.len() >= Self::KEPT {
            self.0.pop_front();
        }
        self.0.push_back((count, code.to_string()));
    }

    /// The `history` of a `history_reply`: `[session, line, source]` triples.
    pub(super) fn reply(&self) -> Vec<Value> {
        self.0.iter().map(|(n, code)| json!([0, n, code])).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::History;

    #[test]
    fn the_oldest_cells_are_forgotten_past_the_bound() {
        let mut history = History::default();
        for n in 1..=(History::KEPT as u64 + 2) {
            history.remember(n, &format!("x = {n}"));
        }
        let reply = history.reply();
        assert_eq!(reply.len(), History::KEPT);
        assert_eq!(reply[0], serde_json::json!([0, 3, "x = 3"]));
    }
}
