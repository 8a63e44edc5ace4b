"""Figures of a daemon and its workers for the long runs (chaos, soak): the resident memory
and open descriptors of every process, taken at each tenth (decile) of a run, and the JSON
summary those runs write with `--summary FILE`.

A worker's figures cover its whole tree (the Python worker's interpreter under its shim, and
anything a cell started), found by parent links through /proc, never by name.
"""

import json
import os
import threading
import time

from daemon_world import open_fds, rss_bytes


def cpu_ns(pid):
    """CPU nanoseconds of the live threads of `pid` (their schedstat run time)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            continue
    return total


def thread_cpu_ns(pid):
    """Each live thread of `pid`: its CPU nanoseconds (schedstat run time), by thread id."""
    times = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                times[tid] = int(f.read().split()[0])
        except OSError:
            continue
    return times


def cpu_ns_since(pid, before):
    """The CPU nanoseconds `pid`'s threads spent since `before` (a `thread_cpu_ns` reading):
    a thread gone since (an idle pool thread that exited) takes its whole time with it, which
    a difference of two sums would count as negative; it is left out instead."""
    now = thread_cpu_ns(pid)
    return sum(spent - before.get(tid, 0) for tid, spent in now.items())


def tree(pid):
    """`pid` and its descendants (those alive while the tree is read)."""
    found, stack = [], [pid]
    while stack:
        current = stack.pop()
        found.append(current)
        try:
            for task in os.listdir("/proc/%d/task" % current):
                with open("/proc/%d/task/%s/children" % (current, task)) as f:
                    stack.extend(int(child) for child in f.read().split())
        except OSError:
            pass
    return found


def tree_figures(pid):
    """RSS (bytes), descriptors and process count of `pid`'s tree; a figure that cannot be
    read (a process gone, or not ours to read) is None."""
    pids = tree(pid)
    rss = [rss_bytes(p) for p in pids]
    fds = [open_fds(p) for p in pids]
    return {
        "rss_bytes": None if rss[0] is None else sum(r for r in rss if r is not None),
        "fds": None if None in fds else sum(fds),
        "processes": len(pids),
    }


def every_process(daemon_pid, status_rows):
    """One entry per process of the world: the daemon, then each live worker's tree (by the
    pids `status` gave)."""
    daemon = {"role": "daemon", "pid": daemon_pid,
              "rss_bytes": rss_bytes(daemon_pid), "fds": open_fds(daemon_pid)}
    workers = []
    for row in status_rows:
        pid = row.get("pid")
        if not pid:
            continue
        entry = {"role": "worker", "session": row.get("session"), "language": row.get("language"),
                 "pid": pid}
        entry.update(tree_figures(pid))
        workers.append(entry)
    return [daemon] + workers


class DecileSampler:
    """Takes `every_process` at 0%, 10%, ..., 100% of a run of `duration` seconds, on a
    thread of its own (`start`, then `finish` for the 100% sample once the run is over).
    `progress()` gives the run's counters to record beside each sample."""

    def __init__(self, world, duration, progress):
        self.world = world
        self.duration = duration
        self.progress = progress
        self.samples = []
        self.stopped = threading.Event()
        self.started = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.started = time.monotonic()
        self.thread.start()

    def sample(self, decile):
        rows = []
        try:
            with self.world.connect(timeout=30) as conn:
                rows = conn.call("status") or []
        except Exception as error:  # noqa: BLE001 (a sample must not end the run)
            rows = []
            note = "status failed: %s" % error
        else:
            note = None
        entry = {"decile": decile, "elapsed_s": round(time.monotonic() - self.started, 1)}
        entry.update(self.progress())
        entry["processes"] = every_process(self.world.pid, rows)
        if note:
            entry["note"] = note
        self.samples.append(entry)
        return entry

    def _run(self):
        for decile in range(10):
            at = self.started + self.duration * decile / 10.0
            if self.stopped.wait(max(0.0, at - time.monotonic())):
                return
            self.sample(decile)

    def finish(self):
        """Stops the thread and takes the last (100%) sample."""
        self.stopped.set()
        self.thread.join(60)
        return self.sample(10)


def write_summary(path, summary):
    """Writes `summary` as indented JSON to `path` (`-`: stdout)."""
    text = json.dumps(summary, indent=2, sort_keys=False) + "\n"
    if path == "-":
        print(text, end="")
        return
    with open(path, "w") as f:
        f.write(text)
