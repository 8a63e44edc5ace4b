//! `cellvisor protocol schema`: the JSON Schema of the daemon's protocol, generated from the
//! Rust types. The checked-in `clients/schema/protocol.json` must be exactly this output
//! (a test says so), and the clients' wire types are generated from that file
//! (`scripts/gen-clients`).

use clap::{Args, Subcommand};

/// `cellvisor protocol ...`.
#[derive(Debug, Args)]
pub struct ProtocolArgs {
    #[command(subcommand)]
    command: ProtocolCommand,
}

#[derive(Debug, Subcommand)]
enum ProtocolCommand {
    /// Print the JSON Schema of every request, result, event and error of the daemon's
    /// JSON-RPC protocol (what clients/schema/protocol.json holds).
    Schema,
}

/// Runs `cellvisor protocol ...`; its exit code.
pub fn run(args: ProtocolArgs) -> i32 {
    match args.command {
        ProtocolCommand::Schema => {
            print!("{}", cellvisor_client::protocol::schema::document_text());
            0
        }
    }
}

#[cfg(test)]
mod tests {
    /// The command that regenerates the checked-in schema and the clients' types from it.
    pub const REGENERATE: &str = "cargo run -p cellvisor-cli -- protocol schema > \
         clients/schema/protocol.json && scripts/gen-clients";

    /// The checked-in schema is what the Rust types generate: a change of a protocol type
    /// that is not regenerated (and so not followed by the clients) fails here.
    #[test]
    fn the_checked_in_schema_is_what_the_types_generate() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../clients/schema/protocol.json");
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        let generated = cellvisor_client::protocol::schema::document_text();
        assert!(
            checked_in == generated,
            "{} differs from what the Rust protocol types generate; regenerate it (and the \
             clients' types) with:\n    {REGENERATE}",
            path.display()
        );
    }

    /// The clients' checked-in wire types are what the checked-in schema generates (the
    /// same check `scripts/test` runs), so `cargo test` alone catches clients left behind.
    #[test]
    fn the_clients_types_are_what_the_schema_generates() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let out = std::process::Command::new("python3")
            .arg(root.join("scripts/gen_clients.py"))
            .arg("--check")
            .output()
            .expect("python3 runs scripts/gen_clients.py");
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
