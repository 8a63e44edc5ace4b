//! One way to lock a mutex that a panic may have poisoned, for every crate of the house.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex` even if a panic elsewhere poisoned it: what the house guards with a mutex is
/// plain data (a registry, a routing table, a flag) that a panic leaves whole, and a poisoned
/// lock must take down neither a worker's threads nor the supervisor.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::lock;
    use std::sync::{Arc, Mutex};

    #[test]
    fn a_poisoned_mutex_is_still_locked_with_its_data() {
        let shared = Arc::new(Mutex::new(41));
        let poisoner = Arc::clone(&shared);
        let panicked = std::thread::spawn(move || {
            let mut value = lock(&poisoner);
            *value += 1;
            panic!("a panic while holding the lock");
        })
        .join();
        assert!(panicked.is_err());
        assert!(shared.is_poisoned());
        assert_eq!(*lock(&shared), 42);
    }
}
