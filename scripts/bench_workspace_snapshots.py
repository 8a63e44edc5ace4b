"""Checkpoints of a session's workspace, measured through a real daemon: a workspace of
10,000 files / 1 GB (100 directories of 100 files of 100,000 random bytes), checkpointed
once in full, then again after 1% of the files (100) were rewritten, then once more with
nothing changed; and a restore of the first checkpoint (which puts the 100 files back).
For each: the wall time of the call, and what it added on disk (new blob bytes, the
manifest's size, and the growth of the session's snapshot directory).

  scripts/bench-workspace-snapshots [--binary target/release/cellvisor] [--files N] [--size B]

Prints a table and writes bench/workspace-snapshots.json."""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "clients", "python", "src"))  # the `cellvisor` package
from cellvisor import Daemon  # noqa: E402

CONFIG = """[snapshots]
timeout = "10m"
"""
SESSION = "ws-bench"


def du(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def timed(call):
    start = time.perf_counter()
    result = call()
    return (time.perf_counter() - start) * 1000, result


def fill(workspace, files, size, per_dir=100):
    paths = []
    for i in range(files):
        d = os.path.join(workspace, f"d{i // per_dir:03}")
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"f{i % per_dir:03}.bin")
        with open(path, "wb") as f:
            f.write(os.urandom(size))
        paths.append(path)
    return paths


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default="target/release/cellvisor")
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=100_000, help="bytes per file")
    parser.add_argument("--changed", type=float, default=0.01, help="share of files rewritten")
    args = parser.parse_args()
    daemon = Daemon(args.binary, CONFIG, prefix="cv-bench-ws-", private_dirs=True)
    results = {"binary": args.binary, "files": args.files, "bytes": args.files * args.size}
    try:
        client = daemon.connect()
        first = client.call("eval", {"session": SESSION, "cells": [{"language": "py", "code": "x = 1"}]})
        assert first["cells"][0]["status"] == "complete", first
        state = os.path.join(daemon.dir, "state", "cellvisor")
        workspace = os.path.join(state, "workspaces", "local", SESSION)
        # The daemon this package starts keeps its snapshots beside its state directory.
        trees = next(os.path.join(base, "snapshots", SESSION, "workspace")
                     for base in (daemon.dir, state)
                     if os.path.isdir(os.path.join(base, "snapshots")))
        assert os.path.isdir(workspace), workspace
        start = time.perf_counter()
        paths = fill(workspace, args.files, args.size)
        results["fill_s"] = round(time.perf_counter() - start, 2)

        def checkpoint(name):
            before = du(trees)
            ms, rows = timed(lambda: client.call("checkpoint", {"session": SESSION, "name": name}))
            recorded = rows[0]["workspace"]
            return {
                "ms": round(ms, 1),
                "files": recorded["files"],
                "new_blob_bytes": recorded["new_bytes"],
                "manifest_bytes": os.path.getsize(os.path.join(trees, "checkpoints", name + ".tree")),
                "dir_growth_bytes": du(trees) - before,
            }

        results["full"] = checkpoint("full")
        changed = paths[:: max(1, round(1 / args.changed))]
        for path in changed:
            with open(path, "wb") as f:
                f.write(os.urandom(args.size))
        results["changed_files"] = len(changed)
        results["one_percent"] = checkpoint("one-percent")
        results["unchanged"] = checkpoint("unchanged")
        ms, rows = timed(lambda: client.call("restore", {"session": SESSION, "name": "full"}))
        files = rows[0]["ledger"]["files"]
        results["restore_full"] = {"ms": round(ms, 1), "restored": len(files["restored"]),
                                   "added": len(files["added"]), "removed": len(files["removed"])}
        client.call("close", {"session": SESSION})
        client.close()
    finally:
        daemon.stop()
        daemon.remove()
    for key in ("full", "one_percent", "unchanged"):
        row = results[key]
        print(f"checkpoint {key:12} {row['ms']:9.1f} ms  new blobs {row['new_blob_bytes'] / 1e6:9.2f} MB  "
              f"manifest {row['manifest_bytes'] / 1e3:8.1f} kB  directory +{row['dir_growth_bytes'] / 1e6:9.2f} MB")
    row = results["restore_full"]
    print(f"restore of 'full'       {row['ms']:9.1f} ms  restored {row['restored']} files")
    os.makedirs("bench", exist_ok=True)
    with open("bench/workspace-snapshots.json", "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
