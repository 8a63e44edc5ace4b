//! Everything cellvisor reads of a process in `/proc`, in one place: its `stat` line, its
//! memory (`statm`) and its `status`, parsed by `procfs-core`, and its open descriptors. What is read
//! after every cell is read through files kept open ([`StatFile`], [`DescriptorDir`]): one
//! `pread` (or one seek and the listing) per reading, no open, no close, and a file that
//! outlived its process fails rather than reading the process that took its pid.

use procfs_core::process::{Stat, StatM, Status};
use procfs_core::FromRead;
use rustix::fs::{Dir, Mode, OFlags};
use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::sync::OnceLock;

/// One process as `/proc/<pid>/stat` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// The process id.
    pub pid: u32,
    /// Its parent's id, which links a worker to everything it started.
    pub ppid: u32,
    /// `R`, `S`, `D`, `Z`, `T`, ...
    pub state: char,
    /// User plus system CPU time, in clock ticks.
    pub cpu_ticks: u64,
    /// User plus system CPU time of its children that ended and were waited for, in clock
    /// ticks: what a tree's CPU keeps of the processes that left it.
    pub children_cpu_ticks: u64,
    /// Resident memory, in bytes: what the RSS cap is checked against.
    pub rss_bytes: u64,
    /// When it started, in clock ticks since boot (comparable with `ticks_since_boot`).
    pub start_ticks: u64,
}

impl ProcStat {
    /// Dead but not yet reaped (or being torn down): uses nothing, can do nothing.
    pub fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }

    /// Stopped by a signal (`T`); a tracer's stop (`t`) is not counted.
    pub fn is_stopped(&self) -> bool {
        self.state == 'T'
    }
}

/// The longest `stat` line read in one piece; the kernel's are well under 1 KiB, since the
/// command name is at most 64 bytes.
const STAT_BUFFER: usize = 2048;

/// `/proc/<pid>/<file>`, or this process's (`/proc/self`, which needs no `getpid`) with `None`.
fn path_of(pid: Option<u32>, file: &str) -> String {
    match pid {
        Some(pid) => format!("/proc/{pid}/{file}"),
        None => format!("/proc/self/{file}"),
    }
}

/// The `stat` line of process `pid` (this one with `None`); `None` if it is gone.
fn stat_line(pid: Option<u32>) -> Option<Vec<u8>> {
    let mut text = Vec::with_capacity(512);
    File::open(path_of(pid, "stat"))
        .ok()?
        .read_to_end(&mut text)
        .ok()?;
    Some(text)
}

/// Reads `/proc/<pid>/stat`; `None` if the process is gone.
pub fn stat(pid: u32) -> Option<ProcStat> {
    parse_stat(pid, &stat_line(Some(pid))?)
}

/// Parses a `stat` line of process `pid`; `None` for anything the kernel would not write.
pub fn parse_stat(pid: u32, line: &[u8]) -> Option<ProcStat> {
    // The command name may hold spaces and parentheses: the fields start after the last ')'.
    // The shape is checked first, on the text the parser sees (lossy, trimmed), so that it
    // only gets lines it can slice.
    let text = String::from_utf8_lossy(line);
    let text = text.trim();
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let fields = text.get(close + 1..)?;
    if open == 0 || close < open || !fields.starts_with(' ') || fields.trim().is_empty() {
        return None;
    }
    // The pid and one space before the name, as the kernel writes them: the parser slices
    // the byte before '(' and would panic inside a character.
    let pid_part = text.get(..open - 1)?;
    if !pid_part.bytes().all(|b| b.is_ascii_digit()) || text.as_bytes()[open - 1] != b' ' {
        return None;
    }
    if fields.as_bytes().get(1).is_none_or(u8::is_ascii_whitespace) {
        return None;
    }
    let stat = Stat::from_read(text.as_bytes()).ok()?;
    let cpu = |user: i64, system: i64| {
        u64::try_from(user).unwrap_or(0) + u64::try_from(system).unwrap_or(0)
    };
    Some(ProcStat {
        pid,
        ppid: u32::try_from(stat.ppid).ok()?,
        state: stat.state,
        cpu_ticks: stat.utime + stat.stime,
        children_cpu_ticks: cpu(stat.cutime, stat.cstime),
        rss_bytes: stat.rss.saturating_mul(page_size()),
        start_ticks: stat.starttime,
    })
}

/// Whether process `pid` is stopped by a signal; false when it is gone.
pub fn is_stopped(pid: u32) -> bool {
    stat(pid).is_some_and(|stat| stat.is_stopped())
}

/// A process's memory as `/proc/<pid>/statm` gives it, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    /// Its mapped address space (`VmSize`): what an address-space rlimit caps.
    pub mapped_bytes: u64,
    /// Its resident memory (`VmRSS`).
    pub resident_bytes: u64,
}

/// The memory of process `pid`, or of this process with `None`.
pub fn memory(pid: Option<u32>) -> Option<Memory> {
    let pages = StatM::from_read(File::open(path_of(pid, "statm")).ok()?).ok()?;
    Some(Memory {
        mapped_bytes: pages.size.saturating_mul(page_size()),
        resident_bytes: pages.resident.saturating_mul(page_size()),
    })
}

/// This process's own `stat` (through `/proc/self`, which needs no `getpid`).
pub fn own_stat() -> Option<ProcStat> {
    parse_stat(0, &stat_line(None)?).map(|stat| ProcStat {
        pid: std::process::id(),
        ..stat
    })
}

/// What cellvisor uses of `/proc/<pid>/status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStatus {
    /// The real uid, which a session's processes are found by.
    pub real_uid: u32,
    /// `R`, `S`, `Z`, ... (the first letter of `State:`).
    pub state: char,
    /// The effective capabilities (`CapEff:`), a bit per capability number.
    pub effective_caps: u64,
}

/// Reads `/proc/<pid>/status`, or this process's with `None`; `None` if it is gone.
pub fn status(pid: Option<u32>) -> Option<ProcStatus> {
    parse_status(File::open(path_of(pid, "status")).ok()?)
}

fn parse_status(text: impl Read) -> Option<ProcStatus> {
    let status = Status::from_read(text).ok()?;
    Some(ProcStatus {
        real_uid: status.ruid,
        state: status.state.chars().next()?,
        effective_caps: status.capeff,
    })
}

/// A process's `/proc/<pid>/stat`, opened once and read with one `pread` each time.
#[derive(Debug)]
pub struct StatFile {
    pid: u32,
    file: File,
}

impl StatFile {
    /// Opens the file of `pid`; `None` if the process is gone.
    pub fn open(pid: u32) -> Option<StatFile> {
        let file = File::open(path_of(Some(pid), "stat")).ok()?;
        Some(StatFile { pid, file })
    }

    /// The process it was opened for.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The process now; `None` once it is gone (even if its pid was handed out again).
    pub fn read(&self) -> Option<ProcStat> {
        let mut buffer = [0u8; STAT_BUFFER];
        let read = self.file.read_at(&mut buffer, 0).ok()?;
        if read == buffer.len() {
            return stat(self.pid); // longer than any stat line seen: read it whole
        }
        parse_stat(self.pid, buffer.get(..read)?)
    }
}

/// A process's `/proc/<pid>/fd`, opened once and listed again from its start each time.
pub struct DescriptorDir {
    dir: Dir,
}

impl std::fmt::Debug for DescriptorDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DescriptorDir")
    }
}

impl DescriptorDir {
    /// Opens the listing of `pid`'s descriptors; `None` if it cannot be read.
    pub fn open(pid: u32) -> Option<DescriptorDir> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd: OwnedFd = rustix::fs::open(format!("/proc/{pid}/fd"), flags, Mode::empty()).ok()?;
        Some(DescriptorDir {
            dir: Dir::new(fd).ok()?,
        })
    }

    /// How many descriptors the process has open now (this listing's own descriptor
    /// counts when the process is this one); a listing kept past its process lists none.
    pub fn count(&mut self) -> Option<u64> {
        self.dir.rewind();
        let mut count = 0;
        for entry in self.dir.by_ref() {
            let name = entry.ok()?;
            let name = name.file_name().to_bytes();
            if name != b"." && name != b".." {
                count += 1;
            }
        }
        Some(count)
    }
}

/// How many descriptors process `pid` has open, from one listing of `/proc/<pid>/fd`.
pub fn open_descriptors(pid: u32) -> Option<u64> {
    DescriptorDir::open(pid)?.count()
}

/// The size of a memory page, in bytes: the unit of `stat`'s and `statm`'s memory.
pub fn page_size() -> u64 {
    static PAGE: OnceLock<u64> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        u64::try_from(size).ok().filter(|s| *s > 0).unwrap_or(4096)
    })
}

#[cfg(test)]
#[path = "proc_tests.rs"]
mod tests;
