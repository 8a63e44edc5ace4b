//! cellvisor's worker processes, with the engines this program links. The `cellvisor` binary
//! re-runs itself as `cellvisor __worker <py|js|lua> --socket PATH`, and that lands in [`run`].
//!
//! The work is cut per language, so a program links only the engines it runs:
//!
//! - `cellvisor-worker-core` (`workers/core`): what every worker shares: the runtime (the
//!   connection, the `Engine` trait, the outbox), snapshots, the warden, the cell helpers,
//!   host tools, the worker programs' start ([`entry`]).
//! - `cellvisor-worker-py` (`workers/py`, feature `py`): the Python shim, the runner and, in
//!   `ipython/`, the IPython emulation.
//! - `cellvisor-worker-js` (`workers/js`, feature `js`): QuickJS with the cell rewriter (oxc)
//!   and the web globals.
//! - `cellvisor-worker-lua` (`workers/lua`, feature `lua`): Lua 5.4.
//! - `cellvisor-os` (`workers/os`): process trees, sandbox rules, interpreter discovery, the
//!   lock helper: what the supervisor uses too, free of any engine.
//! - `cellvisor-py-worker` (`workers/py-worker`): the program Python workers run beside
//!   `cellvisor`, built on the core and the Python engine alone.

// A dependency no code uses is build time for nothing (test builds add dev-dependencies).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

use cellvisor_ipc::Language;
use std::path::Path;

pub use cellvisor_worker_core::entry;
pub use cellvisor_worker_core::runtime::WorkerError;

/// Runs a worker for `language` until the supervisor says `Shutdown` or goes away; a language
/// whose engine this program was built without is an error that names the feature.
pub fn run(language: Language, socket: &Path) -> Result<(), WorkerError> {
    match language {
        #[cfg(feature = "js")]
        Language::JavaScript => cellvisor_worker_js::serve(socket),
        #[cfg(feature = "lua")]
        Language::Lua => cellvisor_worker_lua::serve(socket),
        #[cfg(feature = "py")]
        Language::Python => cellvisor_worker_py::serve(socket),
        #[allow(unreachable_patterns)]
        other => Err(not_built(other)),
    }
}

/// The error for a language whose engine is not linked.
#[allow(dead_code)]
fn not_built(language: Language) -> WorkerError {
    WorkerError::Engine(format!(
        "this program was built without the {language} engine (the `{}` feature of cellvisor-workers)",
        language.short_name()
    ))
}
