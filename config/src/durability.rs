//! `snapshots.every-cell-answer`: in a fleet whose snapshots sit behind etcd's fenced pointer,
//! whether an `every-cell` cell's answer waits for its pointer's commit or only for its
//! blob's write (docs/fleet.md, "Durability").

/// When an `every-cell` cell's answer is sent, in etcd mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EveryCellAnswer {
    /// After the cell's state is committed under the lease's fencing token: a cell answered
    /// `complete` is in the state the next node restores.
    #[default]
    Committed,
    /// After the cell's snapshot is written, its commit still under way: a node that dies
    /// (or loses its lease) in between loses an effect its client was told was `complete`.
    Async,
}

impl EveryCellAnswer {
    /// The word the config file uses.
    pub fn as_str(self) -> &'static str {
        match self {
            EveryCellAnswer::Committed => "committed",
            EveryCellAnswer::Async => "async",
        }
    }

    /// The value for a word of the config file.
    pub fn parse(word: &str) -> Option<EveryCellAnswer> {
        match word {
            "committed" => Some(EveryCellAnswer::Committed),
            "async" => Some(EveryCellAnswer::Async),
            _ => None,
        }
    }
}
