"""An `execute_request` round trip (a trivial cell, from the request sent until both its
`execute_reply` and its `status: idle` arrived, as jupyter_client's front ends wait) through
`cellvisor kernel` against ipykernel, each started by jupyter_client from its kernelspec, on
one machine: the median of `--runs` per kernel, the kernels interleaved in blocks so that
they share the machine's state, and each one's ratio to ipykernel's.

The cellvisor kernels run against a daemon in a private world (the `cellvisor` package in
clients/python), their kernelspecs written there by `cellvisor kernel install --prefix`.

Usage: target/test-venv/bin/python scripts/bench_jupyter.py [--binary target/debug/cellvisor]
       [--runs 200] [--block 20] [--languages py,js,lua]
(the venv of `scripts/test-venv jupyter_client ipykernel`).
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "clients", "python", "src"))  # the `cellvisor` package
from cellvisor import Daemon  # noqa: E402
from jupyter_client.manager import start_new_kernel  # noqa: E402

TRIVIAL = {"python3": "1", "cellvisor-python": "1", "cellvisor-javascript": "1", "cellvisor-lua": "x = 1"}
SPEC = {"py": "cellvisor-python", "js": "cellvisor-javascript", "lua": "cellvisor-lua"}


def round_trip(kc, code):
    """Seconds from sending `code` until its reply and its idle status both arrived."""
    start = time.perf_counter()
    msg_id = kc.execute(code)
    replied = idle = False
    while not (replied and idle):
        if not replied:
            reply = kc.get_shell_msg(timeout=30)
            replied = reply["parent_header"].get("msg_id") == msg_id
            if replied and reply["content"]["status"] != "ok":
                raise RuntimeError(f"the cell failed: {reply['content']}")
        if not idle:
            msg = kc.get_iopub_msg(timeout=30)
            idle = (msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "status"
                    and msg["content"]["execution_state"] == "idle")
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=os.path.join(os.path.dirname(HERE), "target", "debug", "cellvisor"))
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--block", type=int, default=20)
    parser.add_argument("--languages", default="py")
    args = parser.parse_args()

    daemon = Daemon(args.binary, prefix="cv-bj-", private_dirs=True)
    kernels = {}
    try:
        prefix = os.path.join(daemon.dir, "jupyter")
        subprocess.run([args.binary, "kernel", "install", "--prefix", prefix], check=True,
                       stdout=subprocess.DEVNULL)
        os.environ.update({
            "CELLVISOR_SOCKET": daemon.socket,
            "CELLVISOR_CONFIG": daemon.config,
            "XDG_RUNTIME_DIR": daemon.run_dir,
            "JUPYTER_PATH": os.path.join(prefix, "share", "jupyter"),
        })
        names = ["python3"] + [SPEC[lang] for lang in args.languages.split(",")]
        for name in names:
            kernels[name] = start_new_kernel(kernel_name=name)
        times = {name: [] for name in names}
        for name, (_, kc) in kernels.items():
            for _ in range(10):  # warm: the worker started, the paths taken once
                round_trip(kc, TRIVIAL[name])
        while len(times[names[0]]) < args.runs:
            for name, (_, kc) in kernels.items():
                for _ in range(min(args.block, args.runs - len(times[name]))):
                    times[name].append(round_trip(kc, TRIVIAL[name]))
        base = statistics.median(times["python3"])
        print(f"trivial execute_request round trip (reply and idle), median of {args.runs}:")
        for name in names:
            median = statistics.median(times[name])
            print(f"  {name:22} {median * 1000:8.3f} ms   ratio to ipykernel {median / base:5.2f}")
    finally:
        for km, kc in kernels.values():
            kc.stop_channels()
            km.shutdown_kernel()
        daemon.stop()


if __name__ == "__main__":
    main()
