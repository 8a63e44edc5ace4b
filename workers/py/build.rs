//! Gives the build an identity, `CELLVISOR_BUILD_ID`: a hash of the sources a Python worker is
//! made of (this engine, the worker core, the OS helpers, the protocol, `cellvisor-py-worker`
//! itself). `cellvisor` hands it to `cellvisor-py-worker`, which runs a Python worker only when
//! it was built from the same sources, and otherwise hands over to `cellvisor` itself: `cargo
//! run` relinks only `cellvisor`, and would leave an older worker program beside it. A change
//! of the JavaScript or Lua engine leaves it as it is (and this crate unbuilt).

use std::collections::hash_map::DefaultHasher;
use std::hash::Hasher;
use std::path::{Path, PathBuf};

/// What a worker is built from, relative to this package.
const SOURCES: [&str; 11] = [
    "src",
    "Cargo.toml",
    "../core/src",
    "../core/Cargo.toml",
    "../os/src",
    "../os/Cargo.toml",
    "../py-worker/src",
    "../py-worker/Cargo.toml",
    "../../ipc/src",
    "../../ipc/Cargo.toml",
    "../../Cargo.lock",
];

fn main() {
    let mut files = Vec::new();
    for source in SOURCES {
        let path = Path::new(source);
        if path.exists() {
            println!("cargo:rerun-if-changed={source}");
            collect(path, &mut files);
        }
    }
    files.sort();
    let mut hasher = DefaultHasher::new();
    for file in &files {
        hasher.write(file.to_string_lossy().as_bytes());
        hasher.write(&std::fs::read(file).unwrap_or_default());
    }
    println!(
        "cargo:rustc-env=CELLVISOR_BUILD_ID={:016x}",
        hasher.finish()
    );
}

/// The files at or under `path`.
fn collect(path: &Path, files: &mut Vec<PathBuf>) {
    match std::fs::read_dir(path) {
        Ok(entries) => {
            for entry in entries.flatten() {
                collect(&entry.path(), files);
            }
        }
        Err(_) if path.is_file() => files.push(path.to_path_buf()),
        Err(_) => {}
    }
}
