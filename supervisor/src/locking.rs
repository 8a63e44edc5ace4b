//! One way to lock the library's mutexes: the house's one helper (what the library guards
//! with a mutex is plain data that a panic leaves whole).

pub(crate) use cellvisor_os::locking::lock;
