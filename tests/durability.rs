//! Durability told, end to end through the daemon and real workers: under `every-cell`
//! snapshots a cell's answer waits for its save and says whether it was written
//! (`saved: {saved, why}`); a save that fails (over `snapshots.max-size`, or on a full disk)
//! is told on that cell's result with a notice, never only logged, and the session goes on.

mod common;

use common::daemon::{cell, Daemon};
use common::{path_str, World, SHORT_INTERVALS};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

fn py(code: &str) -> Value {
    json!([{"language": "py", "code": code}])
}

#[test]
fn a_save_over_max_size_is_told_on_the_cells_result_and_the_next_good_save_too() {
    let config =
        format!("{SHORT_INTERVALS}[snapshots]\nwhen = \"every-cell\"\nmax-size = \"64KiB\"\n");
    let daemon = Daemon::start_in(World::with_config(&config));
    let mut client = daemon.client();
    let small = client.eval("told", py("x = 1"));
    assert_eq!(
        cell(&small, 0)["saved"],
        json!({"saved": true}),
        "{small:#}"
    );
    assert!(cell(&small, 0)["notice"].is_null(), "{small:#}");

    let big = client.eval("told", py("big = 'a' * 200_000\nprint('made')"));
    let big = cell(&big, 0);
    assert_eq!(big["status"], "complete", "{big:#}");
    assert_eq!(big["output"], "made\n");
    assert_eq!(big["saved"]["saved"], false, "{big:#}");
    let why = big["saved"]["why"].as_str().unwrap_or_default();
    assert!(why.contains("snapshots.max-size (64.0 KiB"), "{why}");
    let notice = big["notice"].as_str().unwrap_or_default();
    assert!(
        notice.contains(
            "this cell's state was not saved: the snapshot would be over snapshots.max-size"
        ),
        "{notice}"
    );

    // The session goes on, with its state; once it fits again, the save is told written.
    let after = client.eval("told", py("del big\nprint(x)"));
    assert_eq!(cell(&after, 0)["output"], "1\n");
    assert_eq!(
        cell(&after, 0)["saved"],
        json!({"saved": true}),
        "{after:#}"
    );
    // A cell that failed is not saved, and says nothing about it.
    let failed = client.eval("told", py("raise ValueError('no')"));
    assert_eq!(cell(&failed, 0)["status"], "error");
    assert!(cell(&failed, 0).get("saved").is_none(), "{failed:#}");
    daemon.stop();
}

#[test]
fn without_every_cell_snapshots_a_result_carries_no_saved_field() {
    let daemon = Daemon::start();
    let mut client = daemon.client();
    let result = client.eval("plain", py("x = 1"));
    assert!(cell(&result, 0).get("saved").is_none(), "{result:#}");
    daemon.stop();
}

/// A tiny tmpfs, unmounted when dropped (after the daemon that used it).
struct TinyDisk(PathBuf);

impl TinyDisk {
    fn mount(at: &Path, size: &str) -> TinyDisk {
        std::fs::create_dir_all(at).expect("mount point");
        let mounted = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(at)
            .status()
            .expect("mount runs");
        assert!(
            mounted.success(),
            "this test mounts a tmpfs of {size} to fill a disk: it needs root (CAP_SYS_ADMIN)"
        );
        TinyDisk(at.to_path_buf())
    }

    fn fill(&self) {
        // Everything but a few bytes: the next write of any size fails with ENOSPC.
        let filler = self.0.join("filler");
        let _ = Command::new("dd")
            .args(["if=/dev/zero", "bs=4096"])
            .arg(format!("of={}", path_str(&filler)))
            .stderr(std::process::Stdio::null())
            .status();
    }
}

impl Drop for TinyDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_save_on_a_full_disk_is_told_and_so_is_an_id_that_could_not_be_kept() {
    let world = World::new();
    let dir = world.dir.path().join("snapshots-disk");
    let disk = TinyDisk::mount(&dir, "1m");
    let config = format!(
        "{SHORT_INTERVALS}[snapshots]\nwhen = \"every-cell\"\ndir = \"{}\"\n",
        path_str(&dir)
    );
    std::fs::write(world.config_path(), config).expect("config");
    let daemon = Daemon::start_in(world);
    let mut client = daemon.client();
    let before = client.eval("full", py("x = 41"));
    assert_eq!(
        cell(&before, 0)["saved"],
        json!({"saved": true}),
        "{before:#}"
    );

    disk.fill();
    let result = client
        .call(
            "eval",
            json!({"session": "full", "request_id": "on-a-full-disk", "cells": py("x += 1\nprint(x)")}),
        )
        .expect("answered");
    let told = cell(&result, 0);
    assert_eq!(told["status"], "complete", "{told:#}");
    assert_eq!(told["output"], "42\n");
    assert_eq!(told["saved"]["saved"], false, "{told:#}");
    let why = told["saved"]["why"].as_str().unwrap_or_default();
    assert!(why.contains("No space left on device"), "{why}");
    let notice = told["notice"].as_str().unwrap_or_default();
    assert!(
        notice.contains("this cell's state was not saved"),
        "{notice}"
    );
    assert!(
        notice.contains("request_id could not be kept with the session's saved state"),
        "{notice}"
    );
    // Room again: the next save is written and told so.
    std::fs::remove_file(dir.join("filler")).expect("free the disk");
    let again = client.eval("full", py("print(x)"));
    assert_eq!(cell(&again, 0)["output"], "42\n");
    assert_eq!(
        cell(&again, 0)["saved"],
        json!({"saved": true}),
        "{again:#}"
    );
    daemon.stop();
    drop(disk);
}
