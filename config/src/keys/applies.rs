//! When a changed key takes effect in a running daemon, which re-reads its file on
//! `config/reload` and SIGHUP: each key says so in the table, `config show` prints it and the
//! docs list it, so an operator knows whether a reload is enough.

/// When a new value of a key takes effect after `config/reload` or SIGHUP, from the soonest
/// to the latest. Every key has exactly one, chosen by what reads the key and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AppliesWhen {
    /// The daemon takes it at the reload: its next check, timer tick or decision uses the
    /// new value, for the sessions and workers already running too.
    AtOnce,
    /// Read when a request arrives or one of its cells starts: the cells of requests made
    /// after the reload get it, a cell already running keeps the old value. Where the value
    /// shapes the worker (the sandbox policy), a live worker under another one is replaced
    /// before the next cell, and its state is lost.
    NewCells,
    /// Read when a client connects: connections opened after the reload get it, one already
    /// open (a long-lived host's) keeps the old value until it reconnects.
    NewConnections,
    /// Read when a worker's start is prepared: the workers of sessions opened after the
    /// reload, and the prewarmed pool (refilled at once), get it; a live worker keeps the old
    /// value. A live session starts its replacement workers (after a crash, a reset, another
    /// Python or sandbox) from what it was opened with, unless a Python one takes a
    /// prewarmed worker, so close the session to be sure its worker has the new value.
    NewWorkers,
    /// Read when the daemon starts: a reload reports the change, but the running daemon
    /// keeps the old value until it is restarted.
    Restart,
}

impl AppliesWhen {
    /// Every case, from the soonest to the latest.
    pub const ALL: [AppliesWhen; 5] = [
        AppliesWhen::AtOnce,
        AppliesWhen::NewCells,
        AppliesWhen::NewConnections,
        AppliesWhen::NewWorkers,
        AppliesWhen::Restart,
    ];

    /// A few words after "applies", for `config show` and the docs' key table.
    pub fn label(self) -> &'static str {
        match self {
            AppliesWhen::AtOnce => "at once",
            AppliesWhen::NewCells => "to new cells",
            AppliesWhen::NewConnections => "to new connections",
            AppliesWhen::NewWorkers => "to new workers",
            AppliesWhen::Restart => "at restart",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_has_its_own_label_and_all_lists_each_once_in_order() {
        let labels: Vec<&str> = AppliesWhen::ALL.iter().map(|w| w.label()).collect();
        assert_eq!(
            labels,
            [
                "at once",
                "to new cells",
                "to new connections",
                "to new workers",
                "at restart"
            ]
        );
        assert!(AppliesWhen::ALL.windows(2).all(|pair| pair[0] < pair[1]));
    }
}
