//! One way to lock the library's mutexes.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex` even if a panic elsewhere poisoned it: what the library guards with a mutex
/// is plain data (a config, a registry, a sampler) that a panic leaves whole, and a poisoned
/// lock must not take the supervisor down with it.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
