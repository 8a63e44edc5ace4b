//! `cellvisor-py-worker`: the program Python workers run when it sits next to `cellvisor`.
//! It links only what a Python worker needs (no JavaScript or Lua engine, no daemon), so an
//! idle Python session's shim keeps few pages resident; the supervisor falls back to
//! `cellvisor __worker py` where it is missing. Its package depends on the Python engine and
//! the worker core alone (`tests/dependencies.rs` checks it).

fn main() {
    std::process::exit(cellvisor_worker_core::entry::run_python_worker(
        cellvisor_worker_py::BUILD_ID,
        cellvisor_worker_py::serve,
    ));
}
