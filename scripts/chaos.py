#!/usr/bin/env python3
"""Chaos run: sessions in py, js and lua run self-checking counter cells while a killer
SIGKILLs and SIGSTOPs random workers, by the pids `status` gives.

A counter cell adds one to the session's counter and prints it. The printed value must be
the previous one plus one, unless the result carries a restart notice (then it starts at 1
again); after a cell that errored its worker's state is unknown until the next notice.
Printed at the end: cells, kills, stops, hung requests, wrong answers, protocol errors,
orphans after stop, and the daemon's fds and RSS before and after. The exit status is 1 on
any hung request, wrong answer, protocol error or orphan.

`--long` is the hour-long run at scale: 12 sessions sending 20 cells a request (no progress
notifications) under a signal every 0.115 s, over 30,000 signals in the hour. `--summary
FILE` writes the run as JSON: the counts, and the RSS and descriptors of every process (the
daemon, each worker's tree) at each tenth of the run.

    scripts/chaos [--quick | --long] [--duration SECONDS] [--sessions N] [--summary FILE]
                  [--release]
"""

import argparse
import os
import random
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_world import World, cellvisor_exe, open_fds, rss_bytes  # noqa: E402
from process_figures import DecileSampler, write_summary  # noqa: E402
# daemon_world puts the client package on the path.
from cellvisor import ProtocolError, RpcError  # noqa: E402

LANGUAGES = ["py", "js", "lua"]
COUNTER = {
    "py": "try:\n    n += 1\nexcept NameError:\n    n = 1\nprint(n)",
    "js": "globalThis.n = (globalThis.n ?? 0) + 1; print(n)",
    "lua": "n = (n or 0) + 1; print(n)",
}
# Short intervals so killed and stopped workers are noticed quickly; a budget big enough
# that kills never leave a session failed (each success refills it anyway).
CONFIG = """
[sessions]
max-sessions = 64
heartbeat-interval = "200ms"
heartbeat-timeout = "1s"
interrupt-grace = "1s"
restart-budget = 100
idle-timeout = "0s"
[daemon]
idle-exit = "0s"
"""
# A request that takes this long counts as hung (cells run in milliseconds; a stopped or
# killed worker is replaced within heartbeat-timeout plus a start).
HUNG_AFTER = 60
CELLS_PER_REQUEST = 5


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.cells = self.kills = self.stops = self.hung = self.wrong = self.errors = 0
        self.protocol_errors = 0
        self.problems = []

    def progress(self):
        with self.lock:
            return {"cells": self.cells, "signals": self.kills + self.stops}

    def add(self, **counts):
        with self.lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def problem(self, text):
        with self.lock:
            if len(self.problems) < 20:
                self.problems.append(text)


def run_session(world, name, language, deadline, tally, per_request, quiet):
    conn = world.connect(timeout=HUNG_AFTER)
    expected = 1
    known = True  # whether `expected` is certain (false after an error until a notice)
    params = {"session": name}
    if quiet:
        params["events"] = "none"
    try:
        while time.monotonic() < deadline:
            params["cells"] = [{"language": language, "code": COUNTER[language], "timeout": 20}
                               for _ in range(per_request)]
            try:
                result = conn.call("eval", params)
            except (RpcError, ProtocolError) as error:
                # The daemon answered, but not with a result: a refusal, or a line that is not
                # the protocol. Never expected of counter cells.
                tally.add(protocol_errors=1)
                tally.problem("%s: protocol error: %s" % (name, error))
                conn.close()
                conn = world.connect(timeout=HUNG_AFTER)
                known = False
                continue
            except (TimeoutError, OSError) as error:
                tally.add(hung=1)
                tally.problem("%s: request hung or broke: %s" % (name, error))
                conn.close()
                conn = world.connect(timeout=HUNG_AFTER)
                known = False
                continue
            if not isinstance(result, dict) or not isinstance(result.get("cells"), list):
                tally.add(protocol_errors=1)
                tally.problem("%s: a result without cells: %r" % (name, str(result)[:200]))
                known = False
                continue
            for cell in result["cells"]:
                if cell["status"] == "skipped":
                    continue
                tally.add(cells=1)
                if cell.get("notice"):
                    expected, known = 1, True
                if cell["status"] != "complete":
                    tally.add(errors=1)
                    known = False
                    continue
                try:
                    value = int(cell["output"].strip().splitlines()[-1])
                except (ValueError, IndexError):
                    tally.add(wrong=1)
                    tally.problem("%s: unreadable output %r" % (name, cell["output"][:200]))
                    known = False
                    continue
                if known and value != expected:
                    tally.add(wrong=1)
                    tally.problem("%s: printed %d, expected %d (notice: %s)"
                                  % (name, value, expected, cell.get("notice")))
                expected, known = value + 1, True
    finally:
        conn.close()


def killer(world, deadline, interval, tally, stop, paced):
    """A kill or stop every `interval` seconds: after each one's work (`status`, the signal)
    when not `paced`; on a fixed schedule when `paced`, so the run sends duration / interval
    signals whatever each one costs."""
    conn = world.connect(timeout=30)
    stopped = []  # (pid, when to continue it)
    rng = random.Random(14)
    next_at = time.monotonic() + interval
    try:
        while time.monotonic() < deadline and not stop.is_set():
            if paced:
                time.sleep(max(0.0, next_at - time.monotonic()))
                next_at += interval
            else:
                time.sleep(interval)
            now = time.monotonic()
            for pid, at in [s for s in stopped if s[1] <= now]:
                stopped.remove((pid, at))
                try:
                    os.kill(pid, signal.SIGCONT)
                except OSError:
                    pass
            try:
                rows = [r for r in conn.call("status") if r.get("pid")]
            except (OSError, RuntimeError, ConnectionError, ProtocolError):
                conn.close()
                conn = world.connect(timeout=30)
                continue
            if not rows:
                continue
            pid = rng.choice(rows)["pid"]
            try:
                if rng.random() < 0.7:
                    os.kill(pid, signal.SIGKILL)
                    tally.add(kills=1)
                else:
                    os.kill(pid, signal.SIGSTOP)
                    tally.add(stops=1)
                    # Some are continued before the heartbeat timeout, the rest are not.
                    stopped.append((pid, now + rng.choice([0.3, 5.0])))
            except OSError:
                pass
    finally:
        for pid, _ in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        conn.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    scale = parser.add_mutually_exclusive_group()
    scale.add_argument("--quick", action="store_true", help="60 s with 6 sessions (CI)")
    scale.add_argument("--long", action="store_true",
                       help="an hour, 12 sessions of 20-cell requests, a signal every 0.115 s "
                            "(over 30,000); --duration shortens it, the rates stay")
    parser.add_argument("--duration", type=float, help="seconds of chaos (default 600)")
    parser.add_argument("--sessions", type=int, help="concurrent sessions (default 12)")
    parser.add_argument("--kill-interval", type=float,
                        help="seconds between two kills or stops (default 0.1)")
    parser.add_argument("--cells-per-request", type=int,
                        help="counter cells in each eval (default %d)" % CELLS_PER_REQUEST)
    parser.add_argument("--summary", metavar="FILE",
                        help="write the run's JSON summary to FILE (`-`: stdout)")
    parser.add_argument("--release", action="store_true", help="build and run a release binary")
    parser.add_argument("--exe", help="a cellvisor binary to use instead of building one")
    args = parser.parse_args()
    # Each mode's defaults; an option given explicitly wins.
    if args.quick:
        defaults = (60.0, 6, 0.25, CELLS_PER_REQUEST)
    elif args.long:
        defaults = (3600.0, 12, 0.115, 20)
    else:
        defaults = (600.0, 12, 0.1, CELLS_PER_REQUEST)
    for name, value in zip(("duration", "sessions", "kill_interval", "cells_per_request"), defaults):
        if getattr(args, name) is None:
            setattr(args, name, value)
    for name in ("duration", "kill_interval"):
        if getattr(args, name) <= 0:
            parser.error("--%s must be a positive number of seconds" % name.replace("_", "-"))
    for name in ("sessions", "cells_per_request"):
        if getattr(args, name) < 1:
            parser.error("--%s must be at least 1" % name.replace("_", "-"))

    exe = args.exe or cellvisor_exe(args.release)
    world = World(exe, CONFIG)
    tally = Tally()
    try:
        # Warm up (every language started once) before the daemon's figures are taken.
        warm = world.connect()
        for language in LANGUAGES:
            warm.call("eval", {"session": "warm-up", "cells": [{"language": language, "code": "1"}]})
        quiet = args.long and events_param_known(warm)
        warm.call("close", {"session": "warm-up"})
        warm.close()
        fds_before, rss_before = open_fds(world.pid), rss_bytes(world.pid)

        started = time.monotonic()
        deadline = started + args.duration
        stop = threading.Event()
        sessions = [threading.Thread(target=run_session,
                                     args=(world, "chaos-%d" % i, LANGUAGES[i % 3], deadline, tally,
                                           args.cells_per_request, quiet))
                    for i in range(args.sessions)]
        kill_thread = threading.Thread(target=killer,
                                       args=(world, deadline, args.kill_interval, tally, stop,
                                             args.long))
        sampler = DecileSampler(world, args.duration, tally.progress)
        sampler.start()
        for thread in sessions + [kill_thread]:
            thread.start()
        for thread in sessions:
            thread.join(args.duration + HUNG_AFTER + 30)
            if thread.is_alive():
                tally.add(hung=1)
                tally.problem("a session thread never finished")
        stop.set()
        kill_thread.join(30)
        ran_for = time.monotonic() - started
        sampler.finish()

        closer = world.connect()
        for i in range(args.sessions):
            closer.call("close", {"session": "chaos-%d" % i})
        closer.close()
        time.sleep(1.0)
        fds_after, rss_after = open_fds(world.pid), rss_bytes(world.pid)
        clean = world.stop()
        time.sleep(2.0)
        orphans = world.processes()
        world.kill_leftovers(orphans)
    except BaseException:
        world.kill_leftovers(world.processes())
        raise
    finally:
        world.remove()

    mib = lambda b: "n/a" if b is None else "%.1f MiB" % (b / (1 << 20))  # noqa: E731
    print("chaos: %d s, %d sessions (py, js, lua), a kill or stop every %g s"
          % (args.duration, args.sessions, args.kill_interval))
    print("cells %d  kills %d  stops %d  errors %d  hung %d  wrong %d  protocol errors %d  "
          "orphans %d" % (tally.cells, tally.kills, tally.stops, tally.errors, tally.hung,
                          tally.wrong, tally.protocol_errors, len(orphans)))
    print("daemon fds %s -> %s, RSS %s -> %s, clean stop: %s"
          % (fds_before if fds_before is not None else "n/a",
             fds_after if fds_after is not None else "n/a", mib(rss_before), mib(rss_after),
             clean))
    for problem in tally.problems:
        print("  " + problem)
    failed = (tally.hung or tally.wrong or tally.protocol_errors or orphans or not clean
              or tally.cells == 0)
    if args.summary:
        write_summary(args.summary, {
            "run": "chaos",
            "mode": "long" if args.long else "quick" if args.quick else "custom",
            "duration_s": round(ran_for, 1),
            "sessions": args.sessions,
            "cells_per_request": args.cells_per_request,
            "kill_interval_s": args.kill_interval,
            "progress_notifications": not quiet,
            "cells": tally.cells,
            "cells_per_second": round(tally.cells / ran_for, 1) if ran_for > 0 else None,
            "signals": tally.kills + tally.stops,
            "kills": tally.kills,
            "stops": tally.stops,
            "errors": tally.errors,
            "hung": tally.hung,
            "wrong": tally.wrong,
            "protocol_errors": tally.protocol_errors,
            "orphans": len(orphans),
            "clean_stop": clean,
            "daemon": {"fds_before": fds_before, "fds_after": fds_after,
                       "rss_before": rss_before, "rss_after": rss_after},
            "passed": not failed,
            "problems": tally.problems,
            "deciles": sampler.samples,
        })
    return 1 if failed else 0


def events_param_known(conn):
    """Whether this daemon takes `events: "none"` (no progress notifications, so the client
    reads only the answers); an older one refuses the field."""
    try:
        conn.call("eval", {"session": "warm-up", "events": "none",
                           "cells": [{"language": "lua", "code": "1"}]})
        return True
    except RpcError:
        return False


if __name__ == "__main__":
    sys.exit(main())
