//! What cellvisor asks of the operating system, shared by the supervisor and every worker,
//! and free of any language engine: the supervisor links this instead of reaching into the
//! workers.
//!
//! - [`proc`]: what is read of a process in `/proc` (stat, memory, descriptors), in one
//!   place; [`process_tree`]: a process tree from it: find, measure, end.
//! - [`sandbox`]: the Landlock confinement the supervisor asks for, applied once by the
//!   worker before its first cell (and the worker's own network namespace, entered first).
//! - [`interpreter`]: which Python a session runs (virtualenvs, the configured one, PATH,
//!   version-manager shims resolved); [`start_check`]: why one cannot run the runner.
//! - [`secrets`]: non-dumpable processes, so cells cannot read the supervisor's memory.
//! - [`atomic_file`]: replacing a file so no reader sees half of it.
//! - [`locking`]: one way to lock a mutex a panic may have poisoned.

// A dependency no code uses is build time for nothing (test builds add dev-dependencies).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod atomic_file;
pub mod interpreter;
pub mod locking;
pub mod proc;
pub mod process_tree;
pub mod sandbox;
pub mod secrets;
pub mod start_check;
