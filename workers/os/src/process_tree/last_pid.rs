//! The last pid the kernel handed out, read through a file opened once: a cell's engine
//! thread may be confined (Landlock) so that it cannot open `/proc` files, but it can still
//! read one opened before. One `pread` per reading.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::OnceLock;

/// Where the counter is read, and how its text is read.
#[derive(Debug)]
pub struct LastPid {
    file: File,
    /// `/proc/loadavg` (the counter is its last field) rather than `ns_last_pid`.
    loadavg: bool,
}

impl LastPid {
    /// Opens the counter: `/proc/sys/kernel/ns_last_pid`, else the last field of
    /// `/proc/loadavg` (the same figure); `None` if neither can be read.
    pub fn open() -> Option<LastPid> {
        let opened = File::open("/proc/sys/kernel/ns_last_pid")
            .map(|file| LastPid {
                file,
                loadavg: false,
            })
            .or_else(|_| {
                File::open("/proc/loadavg").map(|file| LastPid {
                    file,
                    loadavg: true,
                })
            })
            .ok()?;
        opened.read().map(|_| opened)
    }

    /// The last pid handed out in this process's pid namespace, now.
    pub fn read(&self) -> Option<u32> {
        let mut buffer = [0u8; 128];
        let read = self.file.read_at(&mut buffer, 0).ok()?;
        let text = std::str::from_utf8(buffer.get(..read)?).ok()?;
        parse(text, self.loadavg)
    }
}

fn parse(text: &str, loadavg: bool) -> Option<u32> {
    let field = if loadavg {
        text.split_whitespace().last()?
    } else {
        text.trim()
    };
    field.parse().ok()
}

/// Where pids wrap (`/proc/sys/kernel/pid_max`), read once; the kernel's default of 32768
/// if unreadable.
pub fn pid_max() -> u32 {
    static MAX: OnceLock<u32> = OnceLock::new();
    *MAX.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .filter(|max| *max > 1)
            .unwrap_or(32768)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_of_the_counter_parse() {
        assert_eq!(parse("6690\n", false), Some(6690));
        assert_eq!(parse("2.10 1.84 1.97 3/115 6691\n", true), Some(6691));
        assert_eq!(parse("", true), None);
        assert_eq!(parse("x", false), None);
    }

    #[test]
    fn the_counter_moves_when_a_process_starts() {
        let counter = LastPid::open().expect("a pid counter on Linux");
        let before = counter.read().expect("a reading");
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("true runs");
        let after = counter.read().expect("a second reading");
        assert!(
            super::super::ownership::handed_out_after(before, child.id(), pid_max()),
            "{} not after {before}",
            child.id()
        );
        assert_ne!(before, after);
        child.wait().expect("reap true");
    }
}
