//! The record of which cell a worker has taken, kept outside the socket.
//!
//! The supervisor needs to know whether a worker that died had taken the cell sent to it (a
//! cell it never took did not kill it and runs again on the replacement). Saying so in a frame
//! would wake the supervisor once more per cell only to learn something it needs after a
//! crash alone, so the worker writes the id into a small file the supervisor created for it,
//! and the supervisor reads the file once the worker is gone. A write to the file is in the
//! page cache as soon as the call returns, so it survives the worker's death at any later
//! point.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// The id that means "no cell taken yet" (cell ids start above it).
pub const NO_CELL: u64 = 0;

/// One worker's record; the supervisor and the worker each hold the same file open.
#[derive(Debug)]
pub struct TakenRecord {
    file: File,
}

impl TakenRecord {
    /// The supervisor's side: a new file (private to its owner) recording no cell yet.
    pub fn create(path: &Path) -> io::Result<TakenRecord> {
        let file = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        let record = TakenRecord { file };
        record.record(NO_CELL)?;
        Ok(record)
    }

    /// The worker's side: the file the supervisor created, opened before the handshake (the
    /// supervisor removes its name once the worker has said hello).
    pub fn open(path: &Path) -> io::Result<TakenRecord> {
        let file = File::options().read(true).write(true).open(path)?;
        Ok(TakenRecord { file })
    }

    /// A record in a file already open, such as an unnamed one shared with a worker in the
    /// same process; it records no cell yet.
    pub fn in_file(file: File) -> io::Result<TakenRecord> {
        let record = TakenRecord { file };
        record.record(NO_CELL)?;
        Ok(record)
    }

    /// Records `cell_id` as taken; called before any of the cell's code runs.
    pub fn record(&self, cell_id: u64) -> io::Result<()> {
        self.file.write_all_at(&cell_id.to_le_bytes(), 0)
    }

    /// Another handle on the same record.
    pub fn try_clone(&self) -> io::Result<TakenRecord> {
        Ok(TakenRecord {
            file: self.file.try_clone()?,
        })
    }

    /// The cell taken last, or [`NO_CELL`].
    pub fn last(&self) -> io::Result<u64> {
        let mut bytes = [0u8; 8];
        self.file.read_exact_at(&mut bytes, 0)?;
        Ok(u64::from_le_bytes(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_worker_records_the_supervisor_reads_through_its_own_handle() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("w.taken");
        let supervisor = TakenRecord::create(&path).expect("create");
        assert_eq!(supervisor.last().expect("read"), NO_CELL);
        let worker = TakenRecord::open(&path).expect("open");
        // The name may go once both hold the file.
        std::fs::remove_file(&path).expect("remove");
        worker.record(17).expect("record");
        assert_eq!(supervisor.last().expect("read"), 17);
        worker.record(1 << 50).expect("record");
        assert_eq!(supervisor.last().expect("read"), 1 << 50);
        drop(worker);
        assert_eq!(supervisor.last().expect("read"), 1 << 50);
    }

    #[test]
    fn a_record_is_never_made_over_an_existing_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("w.taken");
        std::fs::write(&path, b"someone else's").expect("write");
        assert!(TakenRecord::create(&path).is_err());
    }
}
