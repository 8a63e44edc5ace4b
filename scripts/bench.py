#!/usr/bin/env python3
"""cellvisor against its peers, side by side, in one run on one machine.

    scripts/bench            # the full run (builds, makes the venv, then runs this file)
    scripts/bench --quick    # fewer repetitions, under two minutes
    scripts/bench --profile  # also a `perf` profile of each system's processes under the warm loop

Systems: cellvisor (through the daemon socket), the floor (a bare `python3 -u` NDJSON child,
scripts/bench_floor.py), Jupyter (ipykernel driven by jupyter_client) and Node (a `node`
child keeping a `vm` context, scripts/bench_node_peer.js). Every figure is repeated and
quoted as its median with its spread (min-max); the raw samples go to bench/results.json
and a chart to bench/chart.svg.

Where time goes: under the warm loop of trivial cells, the CPU each process spends per cell
(host, daemon, worker, interpreter; from /proc) and the loop's wall time per cell. With
--profile, `perf record` of the daemon and workers (and each peer's child) under that loop:
bench/profile-<system>.txt (the report) and .data (for `perf report -i`).

The machine's own limit comes first: one byte back and forth over a Unix socket pair between
two processes, across cores and pinned to one core (wall time and CPU per process per round
trip). A warm cell crosses three such boundaries for Python (host, daemon, shim, interpreter)
and two for JavaScript and Lua, so these rows bound what any cell can cost here.

Everything this script starts (daemons, kernels, children) is stopped by pid in `finally`
blocks, also on Ctrl-C.
"""

import argparse
import json
import operator
import os
import platform
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FLOOR = os.path.join(HERE, "bench_floor.py")
NODE_PEER = os.path.join(HERE, "bench_node_peer.js")
OUTPUT_LINES = 200_000  # x 100 bytes = 20 MB
OUTPUT_BYTES = OUTPUT_LINES * 100

# The cells, per language.
CODE = {
    "py": {
        "trivial": "1+1",
        "flood": "for _ in range(%d):\n    print('x' * 99)" % OUTPUT_LINES,
        "set": "x = 42",
        "get": "x",
        "spin": "while True:\n    pass",
    },
    "js": {
        "trivial": "1+1",
        "flood": "for (let i = 0; i < %d; i++) console.log('x'.repeat(99))" % OUTPUT_LINES,
        "set": "var x = 42",
        "get": "x",
        "spin": "while (true) {}",
    },
    "lua": {
        "trivial": "1+1",
        "flood": "for i = 1, %d do print(string.rep('x', 99)) end" % OUTPUT_LINES,
        "set": "x = 42",
        "get": "x",
        "spin": "while true do end",
    },
}

# Repetitions per figure.
FULL = dict(cold=10, warm=2000, output=5, interrupt=10, crash=10, memory=3, conc=3, conc_cells=500, daemon=5, burst=3,
            transport=5, scaling=(1, 16, 256, 1024), scaling_cells=2000)
QUICK = dict(cold=3, warm=200, output=1, interrupt=3, crash=3, memory=1, conc=1, conc_cells=100, daemon=1, burst=1,
             transport=2, scaling=(1, 16, 256), scaling_cells=400)
# Python's scaling rows stop here unless --scaling-py-max says otherwise: a thousand
# interpreters take ~10 GB, more than a shared bench machine should be asked for.
SCALING_PY_MAX = 256
TRANSPORT_ROUND_TRIPS = 10_000
STATUS_OUTPUT = operator.itemgetter("status", "output")  # of a cell result, at C speed

sys.path.insert(0, os.path.join(ROOT, "clients", "python", "src"))  # the `cellvisor` package
import cellvisor  # noqa: E402  (the daemon's client, clients/python)


def now():
    return time.perf_counter()


def ms(seconds):
    return seconds * 1000.0


# ---------------------------------------------------------------------------------------
# Processes: cleanup, memory


class Cleanup:
    """Things to stop, newest first; every one runs even when another fails."""

    def __init__(self):
        self.actions = []

    def push(self, action):
        self.actions.append(action)
        return action

    def discard(self, action):
        if action in self.actions:
            self.actions.remove(action)

    def run(self):
        while self.actions:
            action = self.actions.pop()
            try:
                action()
            except BaseException as error:  # noqa: BLE001 - cleanup must go on
                print(f"bench: cleanup failed: {error!r}", file=sys.stderr)


CLEANUP = Cleanup()


def kill_pid(pid, sig=signal.SIGKILL):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def stop_popen(proc, grace=2.0):
    """Stops a child we started: closes its stdin, waits a moment, then SIGKILL by pid."""
    if proc.poll() is None:
        try:
            if proc.stdin:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            kill_pid(proc.pid)
            proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream:
            stream.close()


def children_of(pid):
    """Every descendant of pid, from /proc."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
                parents.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def tree(pid):
    return [pid] + children_of(pid)


def rss_pss_kb(pids):
    """Summed Rss and Pss (kB) of the given processes, from /proc/PID/smaps_rollup."""
    rss = pss = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1])
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1])
        except OSError:
            pass
    return rss, pss


def status_kb(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def reset_peak_rss(pid):
    """Resets VmHWM (writing 5 to clear_refs); False when the kernel does not allow it."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def cpu_reading(pid):
    """What process pid has run so far: each thread's /proc schedstat run time (ns, exact)
    and the process's utime+stime from /proc/PID/stat (clock ticks, counting exited threads
    too). None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None
    threads = {}
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    threads[tid] = int(f.read().split()[0])
            except (OSError, IndexError, ValueError):
                pass
    except OSError:
        pass
    return threads, ticks


def cpu_spent_ns(before, after):
    """CPU ns between two readings: exact when every thread of the first is still there
    (threads started since count whole), else from clock ticks (10 ms steps)."""
    (threads0, ticks0), (threads1, ticks1) = before, after
    if threads0 and all(tid in threads1 for tid in threads0):
        return sum(ns - threads0.get(tid, 0) for tid, ns in threads1.items())
    return (ticks1 - ticks0) * 1e9 / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU microseconds per cell of each process of a system (host, daemon, worker,
    interpreter), read before and after a loop of cells, and the loop's wall time."""

    def __init__(self, roles):
        self.roles = {role: pid for role, pid in roles.items() if pid}
        self.before = {role: cpu_reading(pid) for role, pid in self.roles.items()}
        self.started = now()

    def per_cell(self, cells):
        """{role: CPU µs per cell}, with "total" and "wall" (µs per cell of the loop)."""
        wall = now() - self.started
        out = {}
        for role, pid in self.roles.items():
            after = cpu_reading(pid)
            if after is not None and self.before[role] is not None:
                out[role] = cpu_spent_ns(self.before[role], after) / 1000 / cells
        out["total"] = sum(out.values())
        out["wall"] = wall * 1e6 / cells
        return out


def profiled(pids, name):
    """Starts `perf record` of pids (the daemon and workers) when --profile asks for it and
    perf works here; returns a function that stops it and writes the report next to the
    results. A no-op otherwise."""
    if not ARGS.profile or not pids:
        return lambda: None
    perf = shutil.which("perf")
    if perf is None:
        print("bench: --profile: perf not found (apt package linux-perf): no profile", file=sys.stderr)
        ARGS.profile = False
        return lambda: None
    os.makedirs(ARGS.out, exist_ok=True)
    data = os.path.join(ARGS.out, f"profile-{name}.data")
    # cpu-clock: a software event, so this works where hardware counters are not exposed.
    proc = subprocess.Popen(
        [perf, "record", "-q", "-e", "cpu-clock", "-F", "4999", "-g", "-o", data,
         "-p", ",".join(str(p) for p in pids)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    cleanup = CLEANUP.push(lambda: stop_popen(proc))
    time.sleep(0.3)  # perf attaches before the loop starts

    def stop():
        CLEANUP.discard(cleanup)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                kill_pid(proc.pid)
                proc.wait()
        report = os.path.join(ARGS.out, f"profile-{name}.txt")
        with open(report, "w") as f:
            subprocess.run(
                [perf, "report", "-i", data, "--stdio", "--no-children", "--sort", "pid,dso,symbol", "-g", "none",
                 "--percent-limit", "0.5"],
                stdout=f, stderr=subprocess.DEVNULL,
            )
        print(f"bench: profile of {name}: {report} (raw: {data})", file=sys.stderr)

    return stop


# ---------------------------------------------------------------------------------------
# The floor and Node: a child reading {"code"} lines, writing raw output then "\x1e{status}\n"


class PipeSession:
    def __init__(self, argv):
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tempfile.gettempdir()
        )
        self.cleanup = CLEANUP.push(self.close)
        self.buffer = b""

    @property
    def pid(self):
        return self.proc.pid

    def send(self, code):
        self.proc.stdin.write((json.dumps({"code": code}) + "\n").encode())
        self.proc.stdin.flush()

    def wait(self, keep=True, timeout=None):
        """Reads until the end-of-cell record: (status, output or byte count). TimeoutError
        after `timeout` seconds without it (what was read so far is kept for the next wait)."""
        fd = self.proc.stdout.fileno()
        deadline = None if timeout is None else now() + timeout
        kept, count = [], 0
        data = self.buffer
        while True:
            mark = data.find(b"\x1e")
            if mark >= 0:
                end = data.find(b"\n", mark)
                if end >= 0:
                    break
            else:
                count += len(data)
                if keep:
                    kept.append(data)
                data = b""
            if deadline is not None and not select.select([fd], [], [], max(0.0, deadline - now()))[0]:
                self.buffer = data
                raise TimeoutError("no end-of-cell record")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise ConnectionError("the child exited")
            data += chunk
        count += mark
        if keep:
            kept.append(data[:mark])
        status = json.loads(data[mark + 1 : end])["status"]
        self.buffer = data[end + 1 :]
        return status, (b"".join(kept).decode() if keep else count)

    def run(self, code, keep=True):
        self.send(code)
        return self.wait(keep)

    def close(self):
        CLEANUP.discard(self.cleanup)
        stop_popen(self.proc)


def real_python():
    return os.path.realpath(ARGS.python)


def floor_session():
    return PipeSession([real_python(), "-u", FLOOR])


def node_session():
    return PipeSession(["node", NODE_PEER])


# ---------------------------------------------------------------------------------------
# Jupyter: ipykernel driven by jupyter_client


class JupyterSession:
    """A kernel started the standard way: start_kernel, then a client and wait_for_ready."""

    def __init__(self):
        from jupyter_client import KernelManager

        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=tempfile.gettempdir(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.cleanup = CLEANUP.push(self.close)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    @property
    def pid(self):
        return self.km.provisioner.process.pid

    def send(self, code):
        return self.kc.execute(code)

    def wait(self, msg_id, keep=True, timeout=120):
        """A cell is done when both its shell reply and its IOPub idle have arrived."""
        kept, count, idle = [], 0, False
        while not idle:
            msg = self.kc.get_iopub_msg(timeout=timeout)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            text = None
            if kind == "stream":
                text = content["text"]
            elif kind == "execute_result":
                text = content["data"].get("text/plain", "") + "\n"
            elif kind == "error":
                text = content["ename"] + "\n"
            elif kind == "status" and content["execution_state"] == "idle":
                idle = True
            if text is not None:
                count += len(text)
                if keep:
                    kept.append(text)
        while True:
            reply = self.kc.get_shell_msg(timeout=timeout)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        content = reply["content"]
        status = {"ok": "complete", "aborted": "skipped"}.get(content["status"], "error")
        if content.get("ename") == "KeyboardInterrupt":
            status = "cancelled"
        return status, ("".join(kept) if keep else count)

    def run(self, code, keep=True):
        return self.wait(self.send(code), keep)

    def close(self):
        CLEANUP.discard(self.cleanup)
        try:
            self.kc.stop_channels()
        finally:
            try:
                self.km.shutdown_kernel(now=True)
            except Exception:
                process = getattr(self.km.provisioner, "process", None)
                if process is not None:
                    kill_pid(process.pid)


# ---------------------------------------------------------------------------------------
# cellvisor: the daemon and its JSON-RPC socket


class Daemon(cellvisor.Daemon):
    """`cellvisor serve` with its own config, socket and runtime directory, stopped by the
    bench's cleanup if the run is cut short."""

    def __init__(self, prewarm=None, max_sessions=None, mode=None, zygote=None, preload=None,
                 interpreter=None):
        """`prewarm`, `zygote`, `preload`, `interpreter`: `[python]`'s keys (default
        interpreter: the real python); `max_sessions`, `mode`: `[sessions] max-sessions`,
        `mode`; None keeps the default (the configuration users get)."""
        config = (
            "[sessions]\nidle-timeout = \"0s\"\n"
            + ("" if max_sessions is None else f"max-sessions = {max_sessions}\n")
            + ("" if mode is None else f"mode = {json.dumps(mode)}\n")
            + "\n"
            f"[python]\ninterpreter = {json.dumps(interpreter or real_python())}\n"
            + ("" if prewarm is None else f"prewarm = {prewarm}\n")
            + ("" if zygote is None else f"zygote = {json.dumps(zygote)}\n")
            + ("" if preload is None else f"preload = {json.dumps(preload)}\n")
            + "\n"
            "[daemon]\nidle-exit = \"0s\"\n"
        )
        self.cleanup = None  # a failed start stops itself, before this is known
        super().__init__(ARGS.binary, config, prefix="cellvisor-bench-", env={"VIRTUAL_ENV": None},
                         new_session=True)
        self.cleanup = CLEANUP.push(self.stop)

    def workers(self, session=None, lang=None):
        """{(session, language): pid} of the live workers."""
        return {
            (s["session"], s["language"]): s["pid"]
            for s in self.client.call("status")
            if s.get("pid") and (session is None or s["session"] == session) and (lang is None or s["language"] == lang)
        }

    def close_session(self, session):
        self.client.call("close", {"session": session})

    def zygote_ready(self, patience=60.0):
        """Waits until every zygote is ready (a daemon starts the one for its interpreter);
        returns their pids."""
        deadline = now() + patience
        while now() < deadline:
            rows = self.client.call("zygotes")
            if rows and all(r["state"] == "ready" for r in rows):
                return [r["pid"] for r in rows]
            time.sleep(0.05)
        return []

    def stop(self):
        """The shutdown RPC, then SIGKILL by pid if the daemon is still there."""
        CLEANUP.discard(self.cleanup)
        return super().stop(timeout=10)


# ---------------------------------------------------------------------------------------
# Workloads. Each returns raw samples; `check` raises when an answer is wrong.


# IPython's warning when its output cache fills up (every 1000 values), on stderr: it may
# come before or after the value's line, which goes out on stdout.
CACHE_WARNING = ("UserWarning: Output cache limit", "Flushing oldest", "warn('Output cache limit")


def last_line(output):
    """The answer of a cell: its last output line but for IPython's output-cache warning."""
    lines = [line for line in output.strip().splitlines()
             if not any(part in line for part in CACHE_WARNING)]
    return lines[-1] if lines else ""


def check(condition, what):
    if not condition:
        raise AssertionError(what)


# 1. cold start: new session -> result of 1+1 (ms)


def cold_cellvisor(daemon, lang, n, label="cold"):
    conn, samples = daemon.connect(), []
    try:
        for i in range(n):
            session = f"{label}-{lang}-{i}"
            if label == "prewarm":
                time.sleep(0.3)  # the pool (re)fills, as it does between one agent and the next
            t0 = now()
            status, output = STATUS_OUTPUT(conn.cell(session, lang, CODE[lang]["trivial"]))
            samples.append(ms(now() - t0))
            check(last_line(output) == "2", f"cellvisor {lang} cold: {status} {output!r}")
            daemon.close_session(session)
            time.sleep(0.1)  # the old worker goes
    finally:
        conn.close()
    return samples


def back_to_back_cellvisor(daemon, n):
    """New Python sessions opened one after another with no pause (an eval harness, a host
    giving each conversation a session): first cell `1+1`, closed after it (ms each)."""
    conn, samples = daemon.connect(), []
    try:
        for i in range(n):
            session = f"b2b-{i}"
            t0 = now()
            status, output = STATUS_OUTPUT(conn.cell(session, "py", "1+1"))
            samples.append(ms(now() - t0))
            check(last_line(output) == "2", f"cellvisor back to back: {status} {output!r}")
            daemon.close_session(session)
    finally:
        conn.close()
    return samples


def at_once_cellvisor(daemon, n):
    """n new Python sessions opened at the same instant, each on its own connection: the
    time until each answered `1+1` (ms)."""
    conns, samples, errors = [daemon.connect() for _ in range(n)], [], []
    start = threading.Barrier(n + 1)

    def open_one(conn, i):
        try:
            start.wait()
            t0 = now()
            status, output = STATUS_OUTPUT(conn.cell(f"burst-{i}", "py", "1+1"))
            samples.append(ms(now() - t0))
            check(last_line(output) == "2", f"cellvisor at once: {status} {output!r}")
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=open_one, args=(c, i)) for i, c in enumerate(conns)]
    try:
        for thread in threads:
            thread.start()
        start.wait()
        for thread in threads:
            thread.join()
    finally:
        for i, conn in enumerate(conns):
            conn.close()
            daemon.close_session(f"burst-{i}")
    if errors:
        raise errors[0]
    return samples


def new_session_cell_cellvisor(daemon, code, n, label):
    """n new Python sessions one after another, each running `code` as its first cell and
    closed after it (ms each, the whole request)."""
    conn, samples = daemon.connect(), []
    try:
        for i in range(n):
            session = f"{label}-{i}"
            t0 = now()
            status, output = STATUS_OUTPUT(conn.cell(session, "py", code))
            samples.append(ms(now() - t0))
            check(status == "complete", f"cellvisor {label}: {status} {output!r}")
            daemon.close_session(session)
            time.sleep(0.05)  # the old worker goes
    finally:
        conn.close()
    return samples


def bare_import_ms(python, module, n):
    """`import module` in a fresh interpreter, timed inside it (ms each)."""
    code = f"import time; t = time.perf_counter(); import {module}; print((time.perf_counter() - t) * 1000)"
    return [float(subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout)
            for _ in range(n)]


def idle_sessions_pss_mb(daemon, code, n):
    """Total PSS (MB) of n idle Python sessions that each ran `code`, with the zygotes they
    were forked from (PSS splits pages shared between processes among them)."""
    conn, sessions = daemon.connect(), [f"pss-{i}" for i in range(n)]
    try:
        for session in sessions:
            status, output = STATUS_OUTPUT(conn.cell(session, "py", code))
            check(status == "complete", f"cellvisor idle sessions: {status} {output!r}")
        time.sleep(0.5)
        workers = daemon.workers(lang="py")
        pids = [pid for session in sessions for pid in tree(workers[(session, "py")])]
        pids += [r["pid"] for r in daemon.client.call("zygotes") if r.get("pid")]
        return rss_pss_kb(pids)[1] / 1024
    finally:
        conn.close()
        for session in sessions:
            daemon.close_session(session)


def zygote_rows(n, row):
    """The zygote's rows: a new session's `import pandas` with pandas preloaded (against the
    bare import in a fresh interpreter), and 16 idle sessions that imported pandas, forked
    from a zygote that preloaded it or started plainly."""
    code = "import pandas as pd; pd.__version__"
    venv_python = sys.executable  # the bench venv, which has pandas
    step("py: preload = [pandas]: a new session's first cell imports pandas")
    bare = row("cold_py_pandas_bare", "1 ref: bare `import pandas` in a fresh interpreter (floor)", "ms")
    bare.samples["floor"] = bare_import_ms(venv_python, "pandas", n["cold"])
    # prewarm = 0: every session is forked when it asks (a pool worker started before the
    # zygote was ready would have no pandas).
    preloaded = Daemon(max_sessions=16, prewarm=0, preload=["pandas"], interpreter=venv_python)
    plain = None
    try:
        check(preloaded.zygote_ready(), "the pandas zygote did not start")
        r = row("cold_py_pandas", "1 new py session, 1st cell `import pandas as pd` (preload=[pandas], prewarm=0)", "ms")
        r.samples["cellvisor"] = new_session_cell_cellvisor(preloaded, code, n["cold"], "pandas")
        r.samples["floor"] = bare.samples["floor"]
        r.targets = [("cellvisor", "below", 5)]
        step("py: 16 idle sessions that imported pandas: total PSS, zygote vs plain")
        forked = idle_sessions_pss_mb(preloaded, code, 16)
        preloaded.stop()
        plain = Daemon(max_sessions=16, zygote=False, interpreter=venv_python)
        started = idle_sessions_pss_mb(plain, code, 16)
        row("mem_py_pandas16", "6 16 idle py sessions with pandas: total PSS (preload=[pandas])", "MB",
            spread="none").samples["cellvisor"] = [forked]
        row("mem_py_pandas16_plain", "6 16 idle py sessions with pandas: total PSS (zygote=false)", "MB",
            spread="none").samples["cellvisor"] = [started]
        share = row("mem_py_pandas16_share", "6 16 idle py sessions with pandas: zygote PSS / plain PSS", "x",
                    spread="none")
        share.samples["cellvisor"] = [forked / started]
        share.targets = [("cellvisor", "below", 0.4)]
    finally:
        preloaded.stop()
        if plain is not None:
            plain.stop()


def per_call_overhead_cellvisor(warm_daemon, n):
    """A `per-call` request's time (`1+1` on new workers) less the median of a warm session's
    `1+1` measured just before it (ms each)."""
    conn = warm_daemon.connect()
    try:
        conn.cell("per-call-ref", "py", "1+1")
        warm = []
        for _ in range(50):
            t0 = now()
            conn.cell("per-call-ref", "py", "1+1")
            warm.append(ms(now() - t0))
    finally:
        conn.close()
        warm_daemon.close_session("per-call-ref")
    reference = statistics.median(warm)
    daemon, samples = Daemon(mode="per-call"), []
    try:
        conn = daemon.connect()
        try:
            for _ in range(n):
                time.sleep(0.1)  # the request before it is discarded, as between one call and the next
                t0 = now()
                status, output = STATUS_OUTPUT(conn.cell("per-call", "py", "1+1"))
                samples.append(ms(now() - t0) - reference)
                check(last_line(output) == "2", f"cellvisor per-call: {status} {output!r}")
        finally:
            conn.close()
    finally:
        daemon.stop()
    return samples


def cold_daemon_cellvisor(n):
    """The CLI's first call: daemon start + first py cell."""
    samples = []
    for _ in range(n):
        t0 = now()
        daemon = Daemon()
        try:
            status, output = STATUS_OUTPUT(daemon.client.cell("first", "py", "1+1"))
            samples.append(ms(now() - t0))
            check(last_line(output) == "2", f"cellvisor daemon cold: {status} {output!r}")
        finally:
            daemon.stop()
    return samples


def transport_round_trips(one_core):
    """The machine's own limit: one byte back and forth over a Unix socket pair between two
    processes, TRANSPORT_ROUND_TRIPS times. Returns (wall us, CPU us of each process) per round
    trip. With `one_core` both processes are pinned to one CPU, so each hand-off is a direct
    switch; otherwise the kernel places them, and a sleeping process on the other core is
    woken by an interrupt (what every hop of a real cell pays on an idle machine)."""
    n = TRANSPORT_ROUND_TRIPS
    ours, theirs = socket.socketpair()
    cpu = next(iter(os.sched_getaffinity(0)))
    pid = os.fork()
    if pid == 0:
        try:
            ours.close()
            if one_core:
                os.sched_setaffinity(0, {cpu})
            fd = theirs.fileno()
            for _ in range(n):
                os.read(fd, 1)
                os.write(fd, b"x")
        finally:
            os._exit(0)
    theirs.close()
    affinity = os.sched_getaffinity(0)
    try:
        if one_core:
            os.sched_setaffinity(0, {cpu})
        fd = ours.fileno()
        c0, t0 = time.process_time(), now()
        for _ in range(n):
            os.write(fd, b"x")
            os.read(fd, 1)
        wall, mine = now() - t0, time.process_time() - c0
    finally:
        os.sched_setaffinity(0, affinity)
        _, _, usage = os.wait4(pid, 0)
        ours.close()
    other = usage.ru_utime + usage.ru_stime
    return wall / n * 1e6, (mine + other) / 2 / n * 1e6


def interpreter_start(python, n):
    """Reference: a bare interpreter start and exit (`python -u -c pass`), in ms."""
    samples = []
    for _ in range(n):
        t0 = now()
        subprocess.run([python, "-u", "-c", "pass"], check=True)
        samples.append(ms(now() - t0))
    return samples


def cold_pipe(make, n):
    samples = []
    for _ in range(n):
        t0 = now()
        session = make()
        try:
            status, output = session.run("1+1")
            samples.append(ms(now() - t0))
            check(last_line(output) == "2", f"cold: {status} {output!r}")
        finally:
            session.close()
    return samples


def cold_floor(n):
    return cold_pipe(floor_session, n)


def cold_node(n):
    return cold_pipe(node_session, n)


def cold_jupyter(n):
    return cold_pipe(JupyterSession, n)


# 2. warm round trip of a trivial cell (ms per cell)


def warm_loop(run, n):
    samples = []
    for _ in range(n):
        t0 = now()
        _, output = run("1+1")
        samples.append(ms(now() - t0))
        check(last_line(output) == "2", f"warm: {output!r}")
    return samples


def measured_loop(run, n, roles, name):
    """The warm loop, with each process's CPU per cell; profiled under --profile (every
    process but the host)."""
    stop_profile = profiled([pid for role, pid in roles.items() if role != "host" and pid], name)
    meter = CpuMeter(roles)
    samples = warm_loop(run, n)
    cpu = meter.per_cell(n)
    stop_profile()
    return samples, cpu


def warm_cellvisor(daemon, lang, n):
    conn = daemon.connect()
    session = f"warm-{lang}"
    try:
        run = lambda code: STATUS_OUTPUT(conn.cell(session, lang, code))  # noqa: E731
        warm_loop(run, 20)
        worker = daemon.workers(session, lang).get((session, lang))
        interpreter = children_of(worker) if worker else []
        roles = {"host": os.getpid(), "daemon": daemon.pid, "worker": worker,
                 "interpreter": interpreter[0] if interpreter else None}
        return measured_loop(run, n, roles, f"cellvisor-{lang}")
    finally:
        conn.close()
        daemon.close_session(session)


def warm_pipe(make, n, name):
    session = make()
    try:
        warm_loop(session.run, 20)
        return measured_loop(session.run, n, {"host": os.getpid(), "interpreter": session.pid}, name)
    finally:
        session.close()


def warm_floor(n):
    return warm_pipe(floor_session, n, "floor")


def warm_node(n):
    return warm_pipe(node_session, n, "node")


def warm_jupyter(n):
    return warm_pipe(JupyterSession, n, "jupyter")


# 3. a cell printing 20 MB in 100-byte lines. Each repetition runs its host in a child
#    process (`bench.py --output-host`), so the host's peak RSS is its own.


def output_host(system, lang, socket_path):
    """In the host child: runs the flood once; returns seconds and what arrived."""
    code = CODE[lang]["flood"]
    if system == "cellvisor":
        conn = cellvisor.Client(socket_path)
        got = {"bytes": 0, "events": 0, "last": None}

        def on_event(event):
            if event["event"] == "output":
                got["bytes"] += len(event["text"])
                got["events"] += 1
                got["last"] = now()

        session = f"flood-{lang}"
        conn.cell(session, lang, CODE[lang]["trivial"])
        t0 = now()
        cell = conn.cell(session, lang, code, on_event)
        status = cell["status"]
        t1 = now()
        conn.close()
        check(status == "complete", f"cellvisor flood: {status}")
        check(got["bytes"] == OUTPUT_BYTES, f"cellvisor streamed {got['bytes']} bytes")
        check(cell["truncation"]["total_bytes"] == OUTPUT_BYTES, f"cellvisor counted {cell['truncation']}")
        return {
            "seconds": t1 - t0,
            "stream_seconds": got["last"] - t0,
            "bytes": got["bytes"],
            "events": got["events"],
            "artifact": bool(cell["truncation"]["artifact_path"]),
        }
    make = {"floor": floor_session, "node": node_session, "jupyter": JupyterSession}[system]
    session = make()
    try:
        session.run(CODE[lang]["trivial"])
        t0 = now()
        status, count = session.run(code, keep=False)
        t1 = now()
    finally:
        session.close()
    check(status == "complete" and count == OUTPUT_BYTES, f"{system} flood: {status} {count} bytes")
    return {"seconds": t1 - t0, "bytes": count}


def output_run(system, lang, n, daemon=None):
    """Runs the host child n times: seconds, host peak RSS and (cellvisor) daemon peak RSS."""
    runs = []
    for _ in range(n):
        if daemon:
            reset_peak_rss(daemon.pid)
        argv = [sys.executable, os.path.abspath(__file__), "--output-host", system, lang]
        argv += ["--python", ARGS.python, "--socket", daemon.socket if daemon else ""]
        child = subprocess.run(argv, stdout=subprocess.PIPE, check=True)
        run = json.loads(child.stdout.strip().splitlines()[-1])
        if daemon:
            run["daemon_peak_kb"] = status_kb(daemon.pid, "VmHWM")
            daemon.close_session(f"flood-{lang}")
        runs.append(run)
    return runs


# 4. interrupt of a busy loop: request -> reported cancelled -> next cell correct, state kept


def interrupt_cellvisor(daemon, lang, n):
    conn, side = daemon.connect(), daemon.connect()
    session, code = f"intr-{lang}", CODE[lang]
    cancelled, recovered = [], []
    try:
        conn.cell(session, lang, code["set"])
        for _ in range(n):
            request = conn.send_cell(session, lang, code["spin"])
            time.sleep(0.2)
            t0 = now()
            side.call("interrupt", {"session": session, "language": lang})
            cell = conn.result(request)["cells"][0]
            t1 = now()
            status, output = STATUS_OUTPUT(conn.cell(session, lang, code["get"]))
            t2 = now()
            check(cell["status"] == "cancelled", f"cellvisor interrupt: {cell['status']}")
            check(last_line(output) == "42", f"cellvisor after interrupt: {status} {output!r}")
            cancelled.append(ms(t1 - t0))
            recovered.append(ms(t2 - t0))
    finally:
        conn.close()
        side.close()
        daemon.close_session(session)
    return cancelled, recovered


def interrupt_peer(session, interrupt, lang, n):
    code, cancelled, recovered = CODE[lang], [], []
    session.run(code["set"])
    for _ in range(n):
        request = session.send(code["spin"])
        time.sleep(0.2)
        t0 = now()
        interrupt()
        status, _ = session.wait(request) if request is not None else wait_interrupted(session, interrupt)
        t1 = now()
        _, output = session.run(code["get"])
        t2 = now()
        check(status == "cancelled", f"interrupt: {status}")
        check(last_line(output) == "42", f"after interrupt: {output!r}")
        cancelled.append(ms(t1 - t0))
        recovered.append(ms(t2 - t0))
    return cancelled, recovered


def interrupt_pipe(make, lang, n):
    session = make()
    try:
        return interrupt_peer(session, lambda: os.kill(session.pid, signal.SIGINT), lang, n)
    finally:
        session.close()


def wait_interrupted(session, interrupt, patience=2.0, tries=5):
    """A pipe peer's answer to an interrupt, interrupting again when none comes within
    `patience` seconds: a SIGINT can land where the child does not turn it into a cancelled
    cell, and the bench must not hang on it."""
    for _ in range(tries - 1):
        try:
            return session.wait(timeout=patience)
        except TimeoutError:
            interrupt()
    return session.wait(timeout=patience)


def interrupt_floor(n):
    return interrupt_pipe(floor_session, "py", n)


def interrupt_node(n):
    return interrupt_pipe(node_session, "js", n)


def interrupt_jupyter(n):
    session = JupyterSession()
    try:
        return interrupt_peer(session, session.km.interrupt_kernel, "py", n)
    finally:
        session.close()


# 5. crash recovery: kill -9 of the worker -> first correct answer from the replacement (ms)


def crash_cellvisor(daemon, lang, n):
    conn, session, samples, attempts = daemon.connect(), f"crash-{lang}", [], []
    try:
        conn.cell(session, lang, CODE[lang]["trivial"])
        for _ in range(n):
            pid = daemon.workers(session, lang)[(session, lang)]
            t0 = now()
            os.kill(pid, signal.SIGKILL)
            first = None
            for attempt in range(1, 1000):
                cell = conn.cell(session, lang, "1+1")
                status, output = STATUS_OUTPUT(cell)
                if first is None:
                    first = {"status": status, "output": output[-300:], "notice": cell.get("notice")}
                if last_line(output) == "2":
                    break
            samples.append(ms(now() - t0))
            attempts.append({"attempts": attempt, "first": first})
            time.sleep(0.2)
    finally:
        conn.close()
        daemon.close_session(session)
    return samples, attempts


def crash_pipe(make, n):
    samples = []
    session = make()
    try:
        for _ in range(n):
            session.run("1+1")
            t0 = now()
            kill_pid(session.pid)
            session.close()
            session = make()
            _, output = session.run("1+1")
            samples.append(ms(now() - t0))
            check(last_line(output) == "2", f"crash: {output!r}")
    finally:
        session.close()
    return samples


def crash_floor(n):
    return crash_pipe(floor_session, n)


def crash_node(n):
    return crash_pipe(node_session, n)


def crash_jupyter(n):
    session, samples = JupyterSession(), []
    try:
        for _ in range(n):
            session.run("1+1")
            t0 = now()
            kill_pid(session.pid)
            session.km.restart_kernel(now=True)
            session.kc.wait_for_ready(timeout=60)
            _, output = session.run("1+1")
            samples.append(ms(now() - t0))
            check(last_line(output) == "2", f"jupyter crash: {output!r}")
    finally:
        session.close()
    return samples


# 6. memory of idle sessions after one trivial cell: RSS and PSS (kB), one and four


def memory_of(pids_per_session):
    one = rss_pss_kb(pids_per_session[0])
    four = rss_pss_kb([pid for pids in pids_per_session for pid in pids])
    return {"one_rss": one[0], "one_pss": one[1], "four_rss": four[0], "four_pss": four[1]}


def memory_cellvisor(daemon, lang):
    conn, sessions = daemon.connect(), [f"mem-{lang}-{i}" for i in range(4)]
    try:
        for session in sessions:
            conn.cell(session, lang, "1+1")
        time.sleep(0.5)
        workers = daemon.workers(lang=lang)
        figures = memory_of([tree(workers[(s, lang)]) for s in sessions])
        figures["daemon_rss"], figures["daemon_pss"] = rss_pss_kb([daemon.pid])
        return figures
    finally:
        conn.close()
        for session in sessions:
            daemon.close_session(session)


def memory_peer(make):
    sessions = []
    try:
        for _ in range(4):
            sessions.append(make())
            sessions[-1].run("1+1")
        time.sleep(0.5)
        return memory_of([tree(s.pid) for s in sessions])
    finally:
        for session in sessions:
            session.close()


def memory_floor():
    return memory_peer(floor_session)


def memory_node():
    return memory_peer(node_session)


def memory_jupyter():
    return memory_peer(JupyterSession)


# 7. concurrency: 4 sessions x N trivial cells at once (wall seconds)


def concurrently(runs, cells):
    errors = []

    def drive(run):
        try:
            for _ in range(cells):
                _, output = run("1+1")
                check(last_line(output) == "2", f"concurrency: {output!r}")
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=drive, args=(run,)) for run in runs]
    t0 = now()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = now() - t0
    if errors:
        raise errors[0]
    return elapsed


def conc_cellvisor(daemon, lang, cells):
    conns, sessions = [daemon.connect() for _ in range(4)], [f"conc-{lang}-{i}" for i in range(4)]
    try:
        runs = [(lambda code, c=c, s=s: STATUS_OUTPUT(c.cell(s, lang, code))) for c, s in zip(conns, sessions)]
        for run in runs:
            run("1+1")
        return concurrently(runs, cells)
    finally:
        for conn, session in zip(conns, sessions):
            conn.close()
            daemon.close_session(session)


def conc_peer(make, cells):
    sessions = []
    try:
        for _ in range(4):
            sessions.append(make())
            sessions[-1].run("1+1")
        return concurrently([s.run for s in sessions], cells)
    finally:
        for session in sessions:
            session.close()


def conc_floor(cells):
    return conc_peer(floor_session, cells)


def conc_node(cells):
    return conc_peer(node_session, cells)


def conc_jupyter(cells):
    return conc_peer(JupyterSession, cells)


# ---------------------------------------------------------------------------------------
# Statistics, the table, the chart


def summary(samples):
    samples = sorted(samples)
    if not samples:
        return None

    def q(p):
        k = (len(samples) - 1) * p
        lo, hi = int(k), min(int(k) + 1, len(samples) - 1)
        return samples[lo] + (samples[hi] - samples[lo]) * (k - lo)

    return {
        "median": statistics.median(samples),
        "min": samples[0],
        "max": samples[-1],
        "p25": q(0.25),
        "p75": q(0.75),
        "p99": q(0.99),
        "n": len(samples),
    }


SYSTEMS = ["cellvisor", "floor", "jupyter", "node"]

# The per-process CPU rows of the warm loop: which process, as the table names it.
CPU_ROLES = {
    "host": "CPU per cell, host (this client)",
    "daemon": "CPU per cell, daemon",
    "worker": "CPU per cell, worker",
    "interpreter": "CPU per cell, interpreter (child)",
    "total": "CPU per cell, all processes",
    "wall": "wall time per cell (loop)",
}


class Row:
    """One workload: figures per system (lists of samples), lower is better."""

    def __init__(self, key, label, unit, stat="median", spread="range"):
        self.key, self.label, self.unit, self.stat, self.spread = key, label, unit, stat, spread
        self.samples = {}
        self.targets = []  # (peer, kind, bound): kind "faster" = peer/cv >= bound, "within" = cv/peer <= bound
        self.extra = {}

    def value(self, system):
        s = summary(self.samples.get(system) or [])
        return s[self.stat] if s else None

    def ratio(self, peer):
        cv, other = self.value("cellvisor"), self.value(peer)
        if cv in (None, 0) or other is None:
            return None
        return other / cv

    def verdicts(self):
        out = []
        for peer, kind, bound in self.targets:
            cv, other = self.value("cellvisor"), self.value(peer)
            if cv is None or other is None:
                out.append((f"{peer} n/a", None))
                continue
            if kind == "faster":
                figure = other / cv
                out.append((f"{figure:.1f}x vs {peer} (>= {bound:g}x)", figure >= bound))
            elif kind == "within":
                figure = cv / other
                out.append((f"{figure:.2f}x of {peer} (<= {bound:g}x)", figure <= bound))
            elif kind == "fraction":  # cellvisor <= peer * bound
                figure = cv / other
                out.append((f"{figure:.2f} of {peer} (<= {bound:.2f})", figure <= bound))
            elif kind == "below":  # an absolute bound on cellvisor's figure
                out.append((f"{cv:.1f} {self.unit} (< {bound:g})", cv < bound))
        return out

    def cell(self, system):
        s = summary(self.samples.get(system) or [])
        if not s:
            return "-"
        fmt = (lambda v: f"{v:.0f}") if s["median"] >= 100 else (lambda v: f"{v:.3g}")
        text = fmt(s[self.stat])
        if s["n"] > 1 and self.spread != "none":
            lo, hi = (s["p25"], s["p75"]) if self.spread == "iqr" else (s["min"], s["max"])
            text += f" ({fmt(lo)}-{fmt(hi)})"
        return text

    def to_json(self):
        return {
            "key": self.key,
            "label": self.label,
            "unit": self.unit,
            "stat": self.stat,
            "spread": self.spread,
            "summary": {k: summary(v) for k, v in self.samples.items() if v},
            "samples": {k: [round(x, 5) for x in v] for k, v in self.samples.items()},
            "ratios_peer_over_cellvisor": {p: self.ratio(p) for p in SYSTEMS[1:] if self.ratio(p)},
            "targets": [{"text": t, "met": m} for t, m in self.verdicts()],
            "extra": self.extra,
        }


def print_table(rows, out=sys.stdout):
    header = ["workload", "unit"] + SYSTEMS + ["peer/cellvisor", "targets"]
    lines = []
    for row in rows:
        ratios = ", ".join(f"{p} {row.ratio(p):.2g}x" for p in SYSTEMS[1:] if row.ratio(p))
        targets = "; ".join(f"{'met' if ok else 'MISSED' if ok is False else '?'}: {t}" for t, ok in row.verdicts())
        lines.append([row.label, row.unit] + [row.cell(s) for s in SYSTEMS] + [ratios or "-", targets or "-"])
    widths = [max(len(r[i]) for r in [header] + lines) for i in range(len(header))]

    def fmt(r):
        return " | ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()

    print(fmt(header), file=out)
    print("-+-".join("-" * w for w in widths), file=out)
    for line in lines:
        print(fmt(line), file=out)
    print(
        "\nEach figure: median (min-max) over its repetitions; warm rows: median (IQR) and p99 over all cells.\n"
        "peer/cellvisor > 1 means cellvisor is lower (faster or smaller).",
        file=out,
    )


def draw_chart(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: a small, searchable SVG
    import matplotlib.pyplot as plt

    # Rows where cellvisor meets a peer (cellvisor-only rows are in the table and the JSON).
    rows = [r for r in rows if r.samples.get("cellvisor") and len([s for s in SYSTEMS if r.samples.get(s)]) > 1]
    cols = 4
    nrows = (len(rows) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 2.6 * nrows), squeeze=False)
    colors = {"cellvisor": "#2b7bba", "floor": "#7f7f7f", "jupyter": "#f28e2b", "node": "#59a14f"}
    for ax, row in zip(axes.flat, rows):
        systems = [s for s in SYSTEMS if row.samples.get(s)]
        values = [row.value(s) for s in systems]
        stats = [summary(row.samples[s]) for s in systems]
        lo = [max(v - (st["p25"] if row.spread == "iqr" else st["min"]), 0) for v, st in zip(values, stats)]
        hi = [max((st["p75"] if row.spread == "iqr" else st["max"]) - v, 0) for v, st in zip(values, stats)]
        if row.spread == "none":
            lo = hi = [0] * len(values)
        ax.barh(systems, values, xerr=[lo, hi], color=[colors[s] for s in systems], capsize=3)
        ax.invert_yaxis()
        if values and min(values) > 0 and max(values) / min(values) > 30:
            ax.set_xscale("log")
        ax.set_title(f"{row.label} [{row.unit}]", fontsize=9)
        ax.tick_params(labelsize=8)
        for y, (s, v) in enumerate(zip(systems, values)):
            ratio = row.ratio(s) if s != "cellvisor" else None
            note = f" {v:.3g}" + (f"  ({ratio:.2g}x)" if ratio else "")
            ax.text(v, y, note, va="center", fontsize=7)
    for ax in list(axes.flat)[len(rows):]:
        ax.axis("off")
    fig.suptitle("cellvisor vs peers (lower is better; (Nx) = peer / cellvisor; whiskers: spread)", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path)
    plt.close(fig)


# ---------------------------------------------------------------------------------------
# The run


def machine():
    info = {"date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "host": platform.node(), "kernel": platform.release()}
    info["cores"] = os.cpu_count()
    try:
        with open("/proc/meminfo") as f:
            info["memory_gib"] = round(int(f.readline().split()[1]) / 1024 / 1024, 1)
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "?")
    except OSError:
        pass
    info["python"] = subprocess.run([real_python(), "-V"], capture_output=True, text=True).stdout.strip()
    info["python_path"] = real_python()
    info["node"] = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    info["cellvisor"] = subprocess.run([ARGS.binary, "--version"], capture_output=True, text=True).stdout.strip()
    try:
        info["commit"] = subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain"], capture_output=True, text=True).stdout
        if dirty.strip():
            info["commit"] += "+uncommitted"
    except OSError:
        pass
    import jupyter_client
    import ipykernel

    info["jupyter_client"], info["ipykernel"] = jupyter_client.__version__, ipykernel.__version__
    return info


def js_works():
    try:
        d = Daemon()
    except Exception:
        return False
    try:
        return d.client.cell("probe", "js", "1+1")["output"].strip() == "2"
    except Exception:
        return False
    finally:
        d.stop()


def step(name):
    print(f"bench: {name} ...", file=sys.stderr, flush=True)


def run_all(n, languages):
    rows = {}

    def row(key, label, unit, **kw):
        rows[key] = Row(key, label, unit, **kw)
        return rows[key]

    peers = {"py": [("floor", "floor"), ("jupyter", "jupyter")], "js": [("node", "node")], "lua": []}
    impl = {
        "floor": dict(cold=cold_floor, warm=warm_floor, intr=interrupt_floor, crash=crash_floor,
                      mem=memory_floor, conc=conc_floor),
        "node": dict(cold=cold_node, warm=warm_node, intr=interrupt_node, crash=crash_node,
                     mem=memory_node, conc=conc_node),
        "jupyter": dict(cold=cold_jupyter, warm=warm_jupyter, intr=interrupt_jupyter, crash=crash_jupyter,
                        mem=memory_jupyter, conc=conc_jupyter),
    }

    step("transport: Unix-socket round trips between two processes")
    for one_core, where in ((False, "across cores"), (True, "on one core")):
        key = "one_core" if one_core else "cores"
        wall = row(f"transport_{key}", f"0 ref: socket round trip {where}, wall", "us")
        cpu = row(f"transport_{key}_cpu", f"0 ref: socket round trip {where}, CPU per process", "us")
        for _ in range(n["transport"]):
            w, c = transport_round_trips(one_core)
            wall.samples.setdefault("floor", []).append(w)
            cpu.samples.setdefault("floor", []).append(c)

    daemon = Daemon()  # the default configuration (one prewarmed Python worker)
    try:
        for lang in languages:
            lpeers = [p for _, p in peers[lang]]

            step(f"{lang}: cold start")
            r = row(f"cold_{lang}", f"1 cold start {lang}", "ms")
            # With the default prewarm, a Python session's first cell finds a started worker;
            # the pause between sessions lets the pool refill, as it would between agents.
            r.samples["cellvisor"] = cold_cellvisor(daemon, lang, n["cold"], label="prewarm" if lang == "py" else "cold")
            for p in lpeers:
                r.samples[p] = impl[p]["cold"](n["cold"])
            if lang == "py":
                r.targets = [("jupyter", "faster", 50), ("floor", "within", 1.5)]
                ref = row("cold_py_interp", "1 ref: `python -u -c pass` (floor: real, jupyter: venv)", "ms")
                ref.samples["floor"] = interpreter_start(real_python(), n["cold"])
                ref.samples["jupyter"] = interpreter_start(sys.executable, n["cold"])
                step("py: cold start with prewarm = 0")
                unwarmed = Daemon(prewarm=0)
                try:
                    row("cold_py_noprewarm", "1 cold start py (prewarm=0)", "ms").samples["cellvisor"] = (
                        cold_cellvisor(unwarmed, "py", n["cold"])
                    )
                finally:
                    unwarmed.stop()
                step("py: 16 new sessions back to back, then 16 at once (max-sessions = 16)")
                burst = Daemon(max_sessions=16)
                try:
                    # A daemon in its steady state: its zygote started with it.
                    check(burst.zygote_ready(), "the zygote did not start")
                    b2b = [back_to_back_cellvisor(burst, 16) for _ in range(n["burst"])]
                    med = row("cold_py_b2b", "1 16 new py sessions back to back, p50", "ms", stat="median", spread="none")
                    tail = row("cold_py_b2b_p99", "1 16 new py sessions back to back, p99", "ms", stat="p99", spread="none")
                    med.samples["cellvisor"] = tail.samples["cellvisor"] = [x for run in b2b for x in run]
                    med.targets = [("cellvisor", "below", 5)]
                    tail.targets = [("cellvisor", "below", 15)]
                    slowest = row("cold_py_burst", "1 16 new py sessions at once, slowest answer", "ms")
                    slowest.samples["cellvisor"] = [max(at_once_cellvisor(burst, 16)) for _ in range(n["burst"])]
                    slowest.targets = [("cellvisor", "below", 50)]
                finally:
                    burst.stop()
                step("py: 16 new sessions at once with prewarm = 16 (a pool sized for the burst)")
                pooled = Daemon(max_sessions=16, prewarm=16)
                try:
                    check(pooled.zygote_ready(), "the zygote did not start")
                    pooled_burst = []
                    for _ in range(n["burst"]):
                        # The pool refills one fork at a time, a few milliseconds each.
                        time.sleep(2.0)
                        pooled_burst.append(max(at_once_cellvisor(pooled, 16)))
                    row("cold_py_burst_pool", "1 16 new py sessions at once, prewarm=16, slowest answer",
                        "ms").samples["cellvisor"] = pooled_burst
                finally:
                    pooled.stop()
                step("py: 16 new sessions back to back with zygote = false")
                plain = Daemon(max_sessions=16, zygote=False)
                try:
                    b2b = [back_to_back_cellvisor(plain, 16) for _ in range(n["burst"])]
                    row("cold_py_b2b_plain", "1 16 new py sessions back to back, zygote=false, p50", "ms",
                        stat="median", spread="none").samples["cellvisor"] = [x for run in b2b for x in run]
                finally:
                    plain.stop()
                zygote_rows(n, row)
                step("py: per-call mode, a request's overhead over a warm cell")
                pc = row("cold_py_percall", "1 per-call py request, overhead over a warm cell", "ms")
                pc.samples["cellvisor"] = per_call_overhead_cellvisor(daemon, n["cold"])
                pc.targets = [("cellvisor", "below", 5)]
                step("py: daemon start + first cell")
                row("cold_py_daemon", "1 daemon start + 1st py cell", "ms").samples["cellvisor"] = (
                    cold_daemon_cellvisor(n["daemon"])
                )
            if lang == "js":
                r.targets = [("node", "faster", 10)]

            step(f"{lang}: warm round trips")
            samples, cpu = {}, {}
            samples["cellvisor"], cpu["cellvisor"] = warm_cellvisor(daemon, lang, n["warm"])
            for p in lpeers:
                samples[p], cpu[p] = impl[p]["warm"](n["warm"])
            for role in CPU_ROLES:
                c = row(f"cpu_{lang}_{role}", f"2 warm cell {lang}: {CPU_ROLES[role]}", "us", spread="none")
                c.samples = {system: [figures[role]] for system, figures in cpu.items() if role in figures}
                if role == "daemon":
                    c.targets = [("cellvisor", "below", 50)]
            med = row(f"warm_{lang}", f"2 warm cell {lang}, median", "ms", spread="iqr")
            p99 = row(f"warm_{lang}_p99", f"2 warm cell {lang}, p99", "ms", stat="p99", spread="none")
            med.samples = p99.samples = samples
            if lang == "py":
                med.targets = [("jupyter", "faster", 25), ("floor", "within", 1.5)]

            step(f"{lang}: 20 MB output")
            t = row(f"output_{lang}", f"3 20 MB output {lang}", "s")
            peak = row(f"output_{lang}_peak", f"3 20 MB output {lang}: supervisor/host peak RSS", "MB")
            host = row(f"output_{lang}_host", f"3 20 MB output {lang}: host client peak RSS", "MB")
            runs = output_run("cellvisor", lang, n["output"], daemon)
            t.samples["cellvisor"] = [r_["seconds"] for r_ in runs]
            t.extra["cellvisor_stream_seconds"] = [r_["stream_seconds"] for r_ in runs]
            t.extra["cellvisor_events"] = [r_["events"] for r_ in runs]
            peak.samples["cellvisor"] = [r_["daemon_peak_kb"] / 1024 for r_ in runs]
            host.samples["cellvisor"] = [r_["host_peak_kb"] / 1024 for r_ in runs]
            for p in lpeers:
                runs = output_run(p, lang, n["output"] if p != "jupyter" else max(1, min(n["output"], 3)))
                t.samples[p] = [r_["seconds"] for r_ in runs]
                peak.samples[p] = host.samples[p] = [r_["host_peak_kb"] / 1024 for r_ in runs]
            if lang == "py":
                t.targets = [("floor", "within", 1.5)]
                peak.targets = [("cellvisor", "below", 30)]
            peak.extra["note"] = "cellvisor: the daemon's VmHWM; peers: the host process (no supervisor)"

            step(f"{lang}: interrupt")
            a = row(f"intr_{lang}", f"4 interrupt {lang}: until cancelled", "ms")
            b = row(f"intr_{lang}_next", f"4 interrupt {lang}: until next cell ok", "ms")
            a.samples["cellvisor"], b.samples["cellvisor"] = interrupt_cellvisor(daemon, lang, n["interrupt"])
            for p in lpeers:
                a.samples[p], b.samples[p] = impl[p]["intr"](n["interrupt"])
            if lang == "py":
                b.targets = [("jupyter", "faster", 10)]

            step(f"{lang}: crash recovery")
            c = row(f"crash_{lang}", f"5 crash recovery {lang}", "ms")
            c.samples["cellvisor"], c.extra["cellvisor_attempts"] = crash_cellvisor(daemon, lang, n["crash"])
            for p in lpeers:
                c.samples[p] = impl[p]["crash"](n["crash"])
            if lang == "py":
                c.targets = [("jupyter", "faster", 10), ("cellvisor", "below", 5)]

            step(f"{lang}: memory")
            figures = {"cellvisor": [memory_cellvisor(daemon, lang) for _ in range(n["memory"])]}
            for p in lpeers:
                figures[p] = [impl[p]["mem"]() for _ in range(n["memory"])]
            for field, label in [("one_rss", "1 idle session RSS"), ("one_pss", "1 idle session PSS"),
                                 ("four_rss", "4 idle sessions RSS"), ("four_pss", "4 idle sessions PSS")]:
                m = row(f"mem_{lang}_{field}", f"6 {label} {lang}", "MB")
                for system, runs in figures.items():
                    m.samples[system] = [f[field] / 1024 for f in runs]
                if field == "one_rss" and lang == "py":
                    m.targets = [("jupyter", "fraction", 1 / 3)]
                if field == "one_rss" and lang == "js":
                    m.targets = [("node", "fraction", 1 / 5)]
            d = row(f"mem_{lang}_daemon", f"6 cellvisor daemon itself ({lang} sessions up)", "MB")
            d.samples["cellvisor"] = [f["daemon_rss"] / 1024 for f in figures["cellvisor"]]
            d.extra["pss_mb"] = [f["daemon_pss"] / 1024 for f in figures["cellvisor"]]

            step(f"{lang}: concurrency")
            cc = row(f"conc_{lang}", f"7 4 sessions x {n['conc_cells']} cells {lang}", "s")
            cc.samples["cellvisor"] = [conc_cellvisor(daemon, lang, n["conc_cells"]) for _ in range(n["conc"])]
            for p in lpeers:
                cc.samples[p] = [impl[p]["conc"](n["conc_cells"]) for _ in range(n["conc"])]
            if lang == "py":
                cc.targets = [("jupyter", "faster", 20)]
    finally:
        daemon.stop()

    # Many live sessions (scripts/bench_scaling.py): each size on a daemon of its own.
    import bench_scaling
    for lang in languages:
        sizes = [k for k in n["scaling"] if lang != "py" or k <= ARGS.scaling_py_max]
        one = None
        for size in sizes:
            step(f"{lang}: {size} live sessions")
            figures = bench_scaling.measure(ARGS.binary, real_python(), lang, size, n["scaling_cells"])
            one = figures["daemon_us_per_cell"] if size == 1 else one
            for field, label, unit in (("cells_per_s", "cells per second", "1/s"),
                                       ("daemon_us_per_cell", "daemon CPU per cell", "us"),
                                       ("p99_ms", "p99 of a cell", "ms"),
                                       ("pss_mb", "total PSS", "MB"),
                                       ("idle_daemon_us_per_s", "daemon CPU while idle, per second", "us")):
                r = row(f"scale_{lang}_{size}_{field}", f"8 {size} live sessions {lang}: {label}", unit)
                r.samples["cellvisor"] = [figures[field]]
            if one and size > 1:
                r = rows[f"scale_{lang}_{size}_daemon_us_per_cell"]
                r.extra["vs_one_session"] = figures["daemon_us_per_cell"] / one
                r.label += f" ({figures['daemon_us_per_cell'] / one:.2f}x of 1 session)"
    order = ["transport", "cold", "warm", "cpu", "output", "intr", "crash", "mem", "conc", "scale"]
    return sorted(rows.values(), key=lambda r: (order.index(r.key.split("_")[0]), ["py", "js", "lua"].index(r.key.split("_")[1]) if r.key.split("_")[1] in ("py", "js", "lua") else 0))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (under two minutes)")
    parser.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "cellvisor"))
    parser.add_argument("--python", default=None, help="the real interpreter (default: resolved from python3)")
    parser.add_argument("--languages", default=None, help="comma-separated subset of py,js,lua")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench"))
    parser.add_argument(
        "--profile", action="store_true",
        help="record a perf profile of the daemon and workers (and each peer's child) under the warm loop",
    )
    parser.add_argument("--scaling-py-max", type=int, default=SCALING_PY_MAX,
                        help="the largest number of live Python sessions in the scaling rows")
    parser.add_argument("--output-host", nargs=2, metavar=("SYSTEM", "LANG"), help=argparse.SUPPRESS)
    parser.add_argument("--socket", help=argparse.SUPPRESS)
    global ARGS
    ARGS = parser.parse_args()
    if not ARGS.python:
        ARGS.python = subprocess.run(
            ["python3", "-c", "import sys; print(sys.executable)"], capture_output=True, text=True, check=True
        ).stdout.strip()

    if ARGS.output_host:
        try:
            result = output_host(*ARGS.output_host, ARGS.socket)
        finally:
            CLEANUP.run()
        result["host_peak_kb"] = status_kb(os.getpid(), "VmHWM")
        print(json.dumps(result))
        return 0

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    n = QUICK if ARGS.quick else FULL
    try:
        if ARGS.languages:
            languages = ARGS.languages.split(",")
        else:
            languages = ["py", "js", "lua"] if js_works() else ["py", "lua"]
            if "js" not in languages:
                print("bench: the JS worker does not answer 1+1 yet: JS rows skipped", file=sys.stderr)
        info = machine()
        started = now()
        rows = run_all(n, languages)
        info["seconds"] = round(now() - started, 1)
    finally:
        CLEANUP.run()

    os.makedirs(ARGS.out, exist_ok=True)
    print(f"\ncellvisor benchmark, {info['date']}, {info['cores']} cores, {info.get('memory_gib')} GiB, "
          f"{info.get('cpu')}, {info['python']}, node {info['node']}, {info['cellvisor']} ({info.get('commit')}), "
          f"{'quick' if ARGS.quick else 'full'} run, {info['seconds']} s\n")
    print_table(rows)
    results = {"machine": info, "mode": "quick" if ARGS.quick else "full", "repetitions": n,
               "rows": [r.to_json() for r in rows]}
    with open(os.path.join(ARGS.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    try:
        draw_chart(rows, os.path.join(ARGS.out, "chart.svg"))
    except ImportError:
        print("bench: matplotlib missing: no chart", file=sys.stderr)
    print(f"\nwrote {os.path.join(ARGS.out, 'results.json')} and {os.path.join(ARGS.out, 'chart.svg')}")
    return 0


ARGS = None

if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        CLEANUP.run()
        sys.exit(130)
