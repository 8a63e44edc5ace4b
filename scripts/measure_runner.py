#!/usr/bin/env python3
"""The Python runner's per-cell work, step by step, without the shim, the daemon or a client.

    scripts/measure_runner.py [--python PYTHON] [--shell builtin|auto|ipython|all]
                              [--cells 2000] [--code 1+1] [--steps] [--sources DIR]

Starts the runner as the shim does (its files from workers/py/src under their installed
names, commands on fd 3, events on fd 4, output and markers on fd 1), sends `--cells` warm
cells and prints the runner's CPU per cell (its threads' schedstat, as scripts/profile_cell.py
reads it) beside the floor's (scripts/bench_floor.py on the same interpreter, the same cells).

With `--steps`, a second run wraps each step of a cell (the runner's, the prelude's, the
notebook layer's, IPython's shell's) in a CPU timer (`time.thread_time_ns`) inside the runner
and prints each step's inclusive CPU per cell and calls per cell. The timers cost what an
empty wrapped call costs (printed as `timer`), and inclusive times nest: read a step's own
share as its time less its listed sub-steps'.

`--sources` takes the runner's files from another checkout's workers/py/src (say one
`git archive BASE workers/py/src | tar -x -C /tmp/base` made), for a before and after.
"""

import argparse
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = os.path.join(ROOT, "workers", "py", "src")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from process_figures import cpu_ns  # noqa: E402

# Installed name -> file under workers/py/src (as workers/py/src/install.rs writes them).
FILES = {
    "runner.py": "launcher.py",
    "cellvisor_runner.py": "runner.py",
    "cellvisor_prelude.py": "prelude.py",
    "cellvisor_state.py": "state.py",
    "cellvisor_exit.py": "exit.py",
    "cellvisor_ipython.py": "ipython/ipython.py",
    "cellvisor_notebook.py": "ipython/notebook.py",
    "cellvisor_pretty.py": "ipython/pretty.py",
    "cellvisor_magics.py": "ipython/magics.py",
    "cellvisor_inspector.py": "ipython/inspector.py",
    "cellvisor_shell.py": "ipython/shell.py",
    "cellvisor_shell_ipython.py": "ipython/shell_ipython.py",
    "cellvisor_ipython_shim.py": "ipython/ipython_shim.py",
    "cellvisor_ipython_objects.py": "ipython/ipython_objects.py",
}

# The steps timed with --steps: (module or module.Class, attribute). Missing ones are skipped
# (the built-in shell has no IPython; an older IPython lacks a method).
STEPS = [
    ("cellvisor_runner", "_execute"),
    ("cellvisor_runner", "_run_cell"),
    ("cellvisor_runner", "_run_shell_cell"),
    ("cellvisor_runner", "_restore_std_streams"),
    ("cellvisor_runner", "_keep_source"),
    ("cellvisor_runner", "_run_code"),
    ("cellvisor_runner", "_show_trailing_text"),
    ("cellvisor_runner", "_sync"),
    ("cellvisor_runner", "_send_event"),
    ("cellvisor_runner", "_events_intact"),
    ("cellvisor_prelude", "begin_cell"),
    ("cellvisor_prelude", "send_figures"),
    ("cellvisor_prelude", "send_value"),
    ("cellvisor_notebook", "begin_cell"),
    ("cellvisor_notebook", "end_cell"),
    ("cellvisor_notebook", "trailing"),
    ("cellvisor_notebook", "ends_with_semicolon"),
    ("cellvisor_exit", "guard_handlers"),
    ("cellvisor_shell_ipython", "run"),
    ("cellvisor_shell_ipython.CellShell", "transform_cell"),
    ("cellvisor_shell_ipython.CellShell", "_plain_python"),
    ("cellvisor_shell_ipython.CellShell", "run_code"),
    ("cellvisor_shell_ipython.CellDisplayHook", "__call__"),
    ("cellvisor_shell_ipython.CellDisplayHook", "compute_format_data"),
    ("cellvisor_shell_ipython.CellDisplayHook", "write_format_data"),
    ("cellvisor_shell_ipython.CellDisplayHook", "update_user_ns"),
    ("cellvisor_shell_ipython.CellDisplayHook", "log_output"),
    ("IPython.core.interactiveshell.InteractiveShell", "run_cell"),
    ("IPython.core.interactiveshell.InteractiveShell", "_run_cell"),
    ("IPython.core.interactiveshell.InteractiveShell", "run_cell_async"),
    ("IPython.core.interactiveshell.InteractiveShell", "should_run_async"),
    ("IPython.core.interactiveshell.InteractiveShell", "transform_ast"),
    ("IPython.core.interactiveshell.InteractiveShell", "run_ast_nodes"),
    ("IPython.core.interactiveshell.InteractiveShell", "_update_code_co_name"),
    ("IPython.core.interactiveshell.InteractiveShell", "_get_exc_info"),
    ("IPython.core.events.EventManager", "trigger"),
    ("IPython.core.compilerop.CachingCompiler", "ast_parse"),
    ("IPython.core.compilerop.CachingCompiler", "__call__"),
    ("IPython.core.history.HistoryManager", "store_inputs"),
    ("IPython.core.history.HistoryManager", "store_output"),
    ("IPython.core.formatters.DisplayFormatter", "format"),
    ("IPython.core.displayhook.DisplayHook", "finish_displayhook"),
    ("IPython.core.displayhook.DisplayHook", "start_displayhook"),
    ("IPython.core.displayhook.DisplayHook", "fill_exec_result"),
]

# Runs in the runner's process: wraps the steps in timers, then runs the runner; at the end
# of its commands writes {step: [calls, cpu_ns]} to argv[2].
DRIVER = r"""
import functools, inspect, json, sys, time
sys.path.insert(0, sys.argv[1])
import cellvisor_runner as runner
runner.prepare()
runner._import_beside("cellvisor_notebook")
runner._import_beside("cellvisor_exit")
steps = json.loads(sys.argv[3])
totals = {}
clock = time.thread_time_ns

def timed(name, function):
    slot = totals.setdefault(name, [0, 0])
    if inspect.iscoroutinefunction(function):
        @functools.wraps(function)
        async def wrapper(*args, **kwargs):
            start = clock()
            try:
                return await function(*args, **kwargs)
            finally:
                slot[0] += 1
                slot[1] += clock() - start
    else:
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            start = clock()
            try:
                return function(*args, **kwargs)
            finally:
                slot[0] += 1
                slot[1] += clock() - start
    return wrapper

def owner(path):
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        found = sys.modules.get(".".join(parts[:cut]))
        if found is not None:
            for name in parts[cut:]:
                found = getattr(found, name, None)
            return found
    return None

shell_active = sys.modules["cellvisor_shell"].active() is not None
for path, attribute in steps:
    if path.startswith(("IPython", "cellvisor_shell_ipython")) and not shell_active:
        continue
    target = owner(path)
    if target is None or attribute not in getattr(target, "__dict__", {}):
        continue
    setattr(target, attribute, timed(path.rsplit(".", 1)[-1] + "." + attribute,
                                     getattr(target, attribute)))
empty = timed("timer", lambda: None)
for _ in range(1000):
    empty()
try:
    runner.main()
finally:
    with open(sys.argv[2], "w") as out:
        json.dump(totals, out)
"""


def install(directory, sources):
    for installed, source in FILES.items():
        shutil.copyfile(os.path.join(sources, source), os.path.join(directory, installed))


class Runner:
    """The runner as the shim starts it: fd 3 commands, fd 4 events, fd 1 and 2 one pipe."""

    TOKEN = "measure"

    def __init__(self, python, shell, directory, argv):
        commands_read, self.commands = os.pipe()
        self.events, events_write = os.pipe()
        self.output, output_write = os.pipe()
        env = dict(os.environ, CELLVISOR_SYNC_TOKEN=self.TOKEN, CELLVISOR_PYTHON_SHELL=shell,
                   PYTHONIOENCODING="utf-8", MPLBACKEND="Agg")

        def wire():  # via high copies: the pipes may be fds 3 and 4 themselves
            import fcntl

            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (commands_read, events_write)]
            for copy, target in zip(high, (3, 4)):
                os.dup2(copy, target)
                os.set_inheritable(target, True)
                os.close(copy)

        self.process = subprocess.Popen([python, "-u", *argv], stdin=subprocess.DEVNULL,
                                        stdout=output_write, stderr=output_write, env=env,
                                        preexec_fn=wire, close_fds=False, cwd=directory)
        for fd in (commands_read, events_write, output_write):
            os.close(fd)
        self.pending = b""
        self.event_text = b""
        self.ready()

    def ready(self):
        while b'"ready"' not in self.event_text:
            chunk = os.read(self.events, 1 << 16)
            if not chunk:
                raise SystemExit("measure_runner: the runner ended before it was ready: %s"
                                 % os.read(self.output, 1 << 16).decode("utf-8", "replace"))
            self.event_text += chunk
        self.event_text = b""

    def cell(self, cell_id, code):
        line = json.dumps({"type": "execute", "id": cell_id, "code": code, "tools": []}) + "\n"
        os.write(self.commands, line.encode())
        quick = ("\x1ecellvisor-sync:%s:%d:" % (self.TOKEN, cell_id)).encode()
        done = ('"type": "done", "id": %d,' % cell_id).encode()
        while True:
            if quick in self.pending:
                self.pending = self.pending[self.pending.index(quick) + len(quick):]
                return
            if done in self.event_text:
                self.event_text = b""
                return
            readable, _, _ = select.select([self.output, self.events], [], [])
            for fd in readable:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise SystemExit("measure_runner: the runner ended under cell %d: %s"
                                     % (cell_id, self.pending[-2000:].decode("utf-8", "replace")))
                if fd == self.output:
                    self.pending = self.pending[-4096:] + chunk
                else:
                    self.event_text += chunk

    def close(self):
        os.close(self.commands)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self.events, self.output):
            os.close(fd)


class Floor:
    """scripts/bench_floor.py: a bare `python3 -u` NDJSON child."""

    def __init__(self, python):
        self.process = subprocess.Popen([python, "-u", os.path.join(ROOT, "scripts", "bench_floor.py")],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT)

    def cell(self, cell_id, code):
        self.process.stdin.write((json.dumps({"code": code}) + "\n").encode())
        self.process.stdin.flush()
        while not self.process.stdout.readline().startswith(b"\x1e"):
            pass

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=30)


def cpu_per_cell(child, pid, code, cells):
    for cell_id in range(1, 201):  # warm up
        child.cell(cell_id, code)
    before = cpu_ns(pid)
    for cell_id in range(201, 201 + cells):
        child.cell(cell_id, code)
    return (cpu_ns(pid) - before) / cells / 1e3


def measure(args, shell, directory):
    figures = {}
    runner = Runner(args.python, shell, directory, ["runner.py"])
    try:
        figures["runner"] = cpu_per_cell(runner, runner.process.pid, args.code, args.cells)
    finally:
        runner.close()
    if args.steps:
        out = os.path.join(directory, "steps.json")
        driver = os.path.join(directory, "measure_driver.py")
        with open(driver, "w") as f:
            f.write(DRIVER)
        timed = Runner(args.python, shell, directory,
                       [driver, directory, out, json.dumps(STEPS)])
        try:
            figures["timed_runner"] = cpu_per_cell(timed, timed.process.pid, args.code, args.cells)
        finally:
            timed.close()
        with open(out) as f:
            totals = json.load(f)
        total_cells = args.cells + 200
        figures["steps"] = {
            name: (calls / (1000 if name == "timer" else total_cells),
                   spent / calls / 1e3 if name == "timer" else spent / total_cells / 1e3)
            for name, (calls, spent) in totals.items() if calls
        }
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=os.path.realpath(sys.executable))
    parser.add_argument("--shell", default="all", help="builtin, auto, ipython or all")
    parser.add_argument("--cells", type=int, default=2000)
    parser.add_argument("--code", default="1+1")
    parser.add_argument("--steps", action="store_true", help="also time each step")
    parser.add_argument("--sources", default=SOURCES, help="the runner's files (workers/py/src)")
    args = parser.parse_args()
    shells = ["builtin", "ipython"] if args.shell == "all" else [args.shell]

    floor = Floor(args.python)
    try:
        floor_us = cpu_per_cell(floor, floor.process.pid, args.code, args.cells)
    finally:
        floor.close()
    print("%s, %d cells of %r, CPU us per cell (schedstat)" % (args.python, args.cells, args.code))
    print("  %-10s %8.1f" % ("floor", floor_us))
    for shell in shells:
        with tempfile.TemporaryDirectory(prefix="cellvisor-measure-") as directory:
            install(directory, args.sources)
            try:
                figures = measure(args, shell, directory)
            except SystemExit as stop:
                print("  %-10s %s" % (shell, stop))
                continue
        print("  %-10s %8.1f  (%.1fx the floor)" % (shell, figures["runner"],
                                                   figures["runner"] / floor_us))
        if "steps" in figures:
            print("    timed run: %.1f us per cell; inclusive CPU us per cell, calls per cell:"
                  % figures["timed_runner"])
            for name, (calls, spent) in sorted(figures["steps"].items(), key=lambda kv: -kv[1][1]):
                print("      %-46s %8.1f %6.2f" % (name, spent, calls))


if __name__ == "__main__":
    main()
