//! The `cellvisor` command.

mod cli;

fn main() {
    cellvisor::worker_entry::run_worker_if_requested();
    std::process::exit(cli::main());
}
