//! The `cellvisor` command.

fn main() {
    cellvisor::worker_entry::run_worker_if_requested();
    std::process::exit(cellvisor::command_line());
}
