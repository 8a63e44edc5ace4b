//! Giving freed heap memory back to the OS after big requests.
//!
//! glibc's allocator keeps freed memory in its arenas for reuse: one 15 MB request (its line,
//! its parsed cells, their copies on the way to the worker) would leave a daemon that idles
//! at ~16 MB holding ~45 MB for good. Two things keep it flat: blocks of a megabyte or more
//! are always mapped on their own (glibc would otherwise raise that threshold after the first
//! big free and serve later big blocks from arenas it keeps), so freeing them returns them at
//! once; and after a request or answer this big the daemon asks the allocator to return what
//! else it no longer uses. Small requests never pay for either.

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
