//! Giving freed heap memory back to the OS after big requests.
//!
//! glibc's allocator keeps freed memory in its arenas for reuse: one 15 MB request (its line,
//! its parsed cells, their copies on the way to the worker) would leave a daemon that idles
//! at ~16 MB holding ~45 MB for good. Two things keep it flat: blocks of a megabyte or more
//! are always mapped on their own (glibc would otherwise raise that threshold after the first
//! big free and serve later big blocks from arenas it keeps), so freeing them returns them at
//! once; and after a request or answer this big the daemon asks the allocator to return what
//! else it no longer uses. Small requests never pay for either.
//!
//! A spike of connections is the other way to grow: thousands of clients at once each hold a
//! reader, a writer and their buffers, freed in small pieces the allocator keeps when they
//! leave (3000 idle connections took a daemon from 28 to 66 MB, and it stayed there). Once
//! most of a spike's connections are gone ([`spike_passed`]), the daemon trims as after a
//! big request.

/// Requests or answers at least this big are followed by [`release_free_memory`].
pub const BIG_MESSAGE_BYTES: usize = 1024 * 1024;

/// Makes blocks of [`BIG_MESSAGE_BYTES`] or more separate mappings, returned on free; called
/// once when a long-running server starts.
pub fn map_big_blocks_separately() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, BIG_MESSAGE_BYTES as libc::c_int);
    }
}

/// Returns the allocator's free memory to the OS (`malloc_trim`; nothing elsewhere).
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// How long after a spike passed its trim comes: the closed connections' tasks let go of
/// their buffers in the meantime.
pub const SPIKE_SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

/// A spike of at least this many connections open at once is trimmed after.
pub const SPIKE_CONNECTIONS: u64 = 64;

/// Whether a spike of `peak` connections has passed with `open` left: it was a spike, and
/// at most a quarter of it is still open. Called as each connection closes; the caller then
/// takes `open` as the new peak, so a spike that drains is trimmed a few times on its way
/// down (3000 → 750 → 187 → 46), each time with most of what it took free to give back.
pub fn spike_passed(peak: u64, open: u64) -> bool {
    peak >= SPIKE_CONNECTIONS && open <= peak / 4
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spike_passes_once_most_of_it_has_left() {
        assert!(!spike_passed(SPIKE_CONNECTIONS - 1, 0), "not a spike");
        assert!(!spike_passed(3000, 751), "still open");
        assert!(spike_passed(3000, 750));
        assert!(spike_passed(SPIKE_CONNECTIONS, 0));
        // The way down: each trim takes what is open as the next peak.
        assert!(spike_passed(750, 187) && spike_passed(187, 46) && !spike_passed(46, 0));
    }
}
