//! What the next cell is told (the session was started, restarted, reset or evicted; a
//! snapshot was restored; the caller's environment changed): lines gathered until a cell
//! takes them, so no news overwrites earlier news.

/// Lines waiting for the next cell's notice.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Notice(Option<String>);

impl Notice {
    /// A notice holding `first`, if any (an earlier incarnation's story, say).
    pub fn new(first: Option<String>) -> Notice {
        Notice(first)
    }

    /// Adds `line` after what is already waiting.
    pub fn add(&mut self, line: String) {
        self.0 = Some(joined(self.0.take(), line));
    }

    /// Replaces what is waiting with `text` (a reset: earlier news is moot).
    pub fn replace(&mut self, text: String) {
        self.0 = Some(text);
    }

    /// What is waiting, for the cell that takes it.
    pub fn take(&mut self) -> Option<String> {
        self.0.take()
    }
}

/// `line` after `earlier`, one per line.
pub(super) fn joined(earlier: Option<String>, line: String) -> String {
    match earlier {
        Some(earlier) => format!("{earlier}\n{line}"),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_gather_until_a_cell_takes_them() {
        let mut notice = Notice::new(Some("evicted".into()));
        notice.add("restored 3 names".into());
        assert_eq!(notice.take().as_deref(), Some("evicted\nrestored 3 names"));
        assert_eq!(notice.take(), None, "taken once");
        notice.add("first".into());
        assert_eq!(notice.take().as_deref(), Some("first"));
    }

    #[test]
    fn a_replacement_drops_what_was_waiting() {
        let mut notice = Notice::new(Some("old news".into()));
        notice.replace("the session was reset".into());
        notice.add("and restarted".into());
        assert_eq!(
            notice.take().as_deref(),
            Some("the session was reset\nand restarted")
        );
    }
}
