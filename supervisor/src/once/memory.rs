//! What one session remembers of its recent requests: for each `request_id`, a fingerprint
//! of its cells and the result it was answered with. Plain data: the host decides when to
//! look and when to remember; this decides what is kept.
//!
//! Bounded twice: the last `capacity` ids (the oldest forgotten first), and results worth at
//! most `max_result_bytes` together. Past that byte budget the oldest results are let go but
//! their ids and fingerprints stay, so a retry of one is refused as "already ran" rather
//! than run a second time.

use crate::cell::EvalResult;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// What a session knows of one request id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The client's id.
    pub id: String,
    /// SHA-256 (hex) of the request's cells: the same id with other cells is a conflict.
    pub fingerprint: String,
    /// The answer of its first run; `None` once it was let go for the byte budget.
    pub result: Option<EvalResult>,
    /// The bytes of the answer's JSON, for the budget.
    pub bytes: u64,
}

/// What a retry finds.
#[derive(Debug, Clone, PartialEq)]
pub enum Recall {
    /// The id is not remembered: run the request.
    Unknown,
    /// The id ran with these cells: answer this, run nothing.
    Answer(EvalResult),
    /// The id ran with other cells.
    Conflict,
    /// The id ran with these cells, but its answer (this many bytes) was let go.
    LetGo(u64),
}

/// The remembered requests of one session, oldest first.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RequestMemory {
    entries: VecDeque<Entry>,
}

impl RequestMemory {
    /// What a request `id` with cells of `fingerprint` finds.
    pub fn recall(&self, id: &str, fingerprint: &str) -> Recall {
        let Some(entry) = self.entries.iter().find(|e| e.id == id) else {
            return Recall::Unknown;
        };
        if entry.fingerprint != fingerprint {
            return Recall::Conflict;
        }
        match &entry.result {
            Some(result) => Recall::Answer(result.clone()),
            None => Recall::LetGo(entry.bytes),
        }
    }

    /// Remembers the answer of a request's first run, then keeps within the bounds: at most
    /// `capacity` ids, and answers of at most `max_result_bytes` together (the newest answer
    /// is always kept whole, whatever its size).
    pub fn remember(&mut self, entry: Entry, capacity: usize, max_result_bytes: u64) {
        self.entries.retain(|e| e.id != entry.id);
        self.entries.push_back(entry);
        while self.entries.len() > capacity.max(1) {
            self.entries.pop_front();
        }
        let mut total: u64 = self
            .entries
            .iter()
            .filter(|e| e.result.is_some())
            .map(|e| e.bytes)
            .sum();
        let newest = self.entries.len() - 1;
        for entry in self.entries.iter_mut().take(newest) {
            if total <= max_result_bytes {
                break;
            }
            if entry.result.take().is_some() {
                total -= entry.bytes;
            }
        }
    }

    /// The remembered entries, oldest first (to write them out whole).
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter()
    }

    /// The memory `entries` (oldest first) leave within the bounds, as remembered one by one.
    pub fn replay(entries: Vec<Entry>, capacity: usize, max_result_bytes: u64) -> RequestMemory {
        let mut memory = RequestMemory::default();
        for entry in entries {
            memory.remember(entry, capacity, max_result_bytes);
        }
        memory
    }

    /// How many ids are remembered.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(text: &str) -> EvalResult {
        let mut result = EvalResult::from_cells(Vec::new());
        result.node = text.to_string();
        result
    }

    fn entry(id: &str, fingerprint: &str, bytes: u64) -> Entry {
        Entry {
            id: id.into(),
            fingerprint: fingerprint.into(),
            result: Some(answer(id)),
            bytes,
        }
    }

    #[test]
    fn a_retry_finds_the_first_answer_and_other_cells_conflict() {
        let mut memory = RequestMemory::default();
        assert_eq!(memory.recall("a", "f1"), Recall::Unknown);
        memory.remember(entry("a", "f1", 10), 8, 1000);
        assert_eq!(memory.recall("a", "f1"), Recall::Answer(answer("a")));
        assert_eq!(memory.recall("a", "f2"), Recall::Conflict);
        assert_eq!(memory.recall("b", "f1"), Recall::Unknown);
    }

    #[test]
    fn only_the_last_capacity_ids_are_kept() {
        let mut memory = RequestMemory::default();
        for i in 0..5 {
            memory.remember(entry(&format!("r{i}"), "f", 1), 3, 1000);
        }
        assert_eq!(memory.len(), 3);
        assert_eq!(memory.recall("r1", "f"), Recall::Unknown);
        assert!(matches!(memory.recall("r2", "f"), Recall::Answer(_)));
        assert!(matches!(memory.recall("r4", "f"), Recall::Answer(_)));
    }

    #[test]
    fn past_the_byte_budget_old_answers_go_but_their_ids_stay() {
        let mut memory = RequestMemory::default();
        memory.remember(entry("old", "f", 60), 8, 100);
        memory.remember(entry("mid", "f", 30), 8, 100);
        assert!(matches!(memory.recall("old", "f"), Recall::Answer(_)));
        memory.remember(entry("new", "f", 50), 8, 100);
        // 140 > 100: the oldest answer goes first, and that is enough.
        assert_eq!(memory.recall("old", "f"), Recall::LetGo(60));
        assert!(matches!(memory.recall("mid", "f"), Recall::Answer(_)));
        assert_eq!(memory.recall("old", "other"), Recall::Conflict);
        // The newest is kept whole even alone over the budget.
        memory.remember(entry("huge", "f", 500), 8, 100);
        assert!(matches!(memory.recall("huge", "f"), Recall::Answer(_)));
        assert_eq!(memory.recall("mid", "f"), Recall::LetGo(30));
        assert_eq!(memory.len(), 4);
    }

    #[test]
    fn remembering_an_id_again_replaces_it() {
        let mut memory = RequestMemory::default();
        memory.remember(entry("a", "f1", 1), 8, 100);
        memory.remember(entry("a", "f2", 1), 8, 100);
        assert_eq!(memory.len(), 1);
        assert!(matches!(memory.recall("a", "f2"), Recall::Answer(_)));
    }
}
