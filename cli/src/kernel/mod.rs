//! `cellvisor kernel`: a Jupyter kernel process for local front ends (JupyterLab, nbclient,
//! `jupyter console`, VS Code), speaking the five ZeroMQ channels of its connection file
//! and backed by a daemon session through the client library.
//!
//! - `connection`: the connection file (ports, key, scheme).
//! - `session`: the daemon session behind the kernel: its cells, its interrupt, its close.
//! - `serve`: the channels, and each request answered through `crate::jupyter`'s mapping.
//! - `install`: `cellvisor kernel install`, the kernelspecs where Jupyter looks for them.
//! - `parent`: the front end that started the kernel, watched so the kernel ends with it.

pub mod connection;
pub mod install;
pub mod parent;
pub mod serve;
pub mod session;
