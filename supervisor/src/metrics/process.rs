//! The daemon process's own memory and CPU time, read from `/proc/self` at each scrape.

/// What `/proc/self` says of this process; `None` where it could not be read.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OwnUsage {
    pub rss_bytes: Option<u64>,
    pub cpu_seconds: Option<f64>,
}

/// This process's resident memory and user + system CPU seconds.
pub fn own_usage() -> OwnUsage {
    let page = page_size();
    let ticks = clock_ticks();
    OwnUsage {
        rss_bytes: std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|text| rss_pages(&text))
            .zip(page)
            .map(|(pages, page)| pages.saturating_mul(page)),
        cpu_seconds: std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|text| cpu_ticks(&text))
            .zip(ticks)
            .map(|(used, per_second)| used as f64 / per_second as f64),
    }
}

fn page_size() -> Option<u64> {
    sysconf(libc::_SC_PAGESIZE)
}

fn clock_ticks() -> Option<u64> {
    sysconf(libc::_SC_CLK_TCK).filter(|&v| v > 0)
}

fn sysconf(name: libc::c_int) -> Option<u64> {
    // SAFETY: sysconf only reads a system constant; it takes no pointers.
    let value = unsafe { libc::sysconf(name) };
    u64::try_from(value).ok()
}

/// The resident pages: the second field of `statm`.
fn rss_pages(statm: &str) -> Option<u64> {
    statm.split_whitespace().nth(1)?.parse().ok()
}

/// utime + stime (fields 14 and 15 of `stat`), counted after the command's closing
/// parenthesis (the command may itself hold spaces and parentheses).
fn cpu_ticks(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_give_their_cpu_ticks_even_with_odd_command_names() {
        let stat = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 37 5 0 0 20 0 1";
        assert_eq!(cpu_ticks(stat), Some(42));
        assert_eq!(rss_pages("1000 250 100 1 0 200 0"), Some(250));
        assert_eq!(cpu_ticks("garbage"), None);
    }

    #[test]
    fn this_process_has_memory_and_cpu() {
        let own = own_usage();
        assert!(own.rss_bytes.is_some_and(|b| b > 0));
        assert!(own.cpu_seconds.is_some());
    }
}
