"""cellvisor's Python runner: runs cells for the Rust shim that started it.

File descriptors (set up by the shim):
  0  /dev/null
  1  stdout and 2 stderr: a pipe each, which the shim drains and relays as their streams
  3  commands from the shim, one JSON object per line
  4  events to the shim, one JSON object per line

Start-up stays cheap: only modules that `site` already loaded (or tiny built-ins) are
imported here; asyncio and traceback are imported when a cell first needs them. The helpers
cells see in builtins (read, write, tree, display, tool, ...) live in the prelude module
beside this file, which Python loads from cached bytecode.

Between cells, fd 3 may bring a state task instead (`snapshot`, `restore`, `names`): the
`cellvisor_state` module beside this file carries it out, and its report goes out as a
`state` event before the marker and `done` event a cell ends with.

During a cell, fd 3 also carries the answers to the cell's host tool calls: the runner sends
a `tool_call` event and reads fd 3 until the `tool_result` with the same call id arrives.

A cell ends with a sync marker on the output pipe (`\x1ecellvisor-sync:<token>:<id>\x1e`),
after all its output, and a `done` event on fd 4. A cell that sent nothing on fd 4 and
ended ok or interrupted skips the event: its marker carries the status
(`...:<id>:ok\x1e`), written together with the trailing value's text, so a quick cell
reaches the shim in one write.
"""

import _ast  # the C node types: `ast` itself costs milliseconds at every start
import builtins
import io
import json
import linecache
import os
import select
import signal
import sys
import threading
import time

COMMAND_FD = 3
EVENT_FD = 4
STDIN_MESSAGE = "Kernel requested stdin; interactive input is not supported."
RUNNER_FILE = __file__
# Where a cell's trailing expression value is parked for a moment.
RESULT_NAME = "__cellvisor_result__"
# Sources of the most recent cells kept in linecache, so their tracebacks show code: at most
# this many cells and bytes (the newest cell is always kept, whatever its size).
KEPT_CELL_SOURCES = 200
KEPT_CELL_SOURCE_BYTES = 4 << 20
# Commands that save, restore or list the cells' names rather than run a cell.
STATE_TASKS = ("snapshot", "restore", "names")


class StdinNotImplementedError(NotImplementedError):
    """Raised when a cell reads stdin: cells run without a terminal."""


# Named as when the runner ran as the script: tracebacks say `StdinNotImplementedError`.
StdinNotImplementedError.__module__ = "__main__"


class _State:
    cell_id = 0
    # User code of a cell is running, so SIGINT may raise KeyboardInterrupt.
    running = False
    # Depth of runner sections (event writes) that a KeyboardInterrupt must not tear.
    critical = 0
    # SIGINT arrived inside a critical section: raise once the section ends.
    deferred_interrupt = False
    # Bytes of the next command have arrived: SIGINT now means that cell.
    claimed = False
    # SIGINT arrived after the next cell's command was sent but before it started.
    early_interrupt = False
    loop = None
    # Where the sync markers go (set by main).
    marker_fd = None
    # A copy of the error pipe, to put back on fd 2 for each cell.
    error_fd = None
    # Set in a process a cell forked (by `os.register_at_fork`): if it comes back to the loop,
    # it is not the runner. A flag, not a `getpid()` after every cell.
    forked_copy = False
    sync_token = ""
    # Numbers this runner's tool calls; results for other (abandoned) calls are dropped.
    tool_calls = 0
    # The directory the last cell was asked to run in: `%cd` and `os.chdir` hold until a
    # cell asks for another one (as in a kernel, which enters its directory once).
    requested_cwd = None
    # Events written to fd 4 since the running cell began: with none, the cell's end travels
    # in its sync marker on the output pipe (one write; nothing on fd 4 can be overtaken).
    events = 0
    # The trailing value's text (UTF-8), held to go out in the same write as the marker.
    trailing = b""
    # (st_dev, st_ino) of the output pipe: the held text may only take the marker's way
    # while fd 1 is still that pipe.
    output_pipe = None
    # (st_dev, st_ino) of the event pipe: a cell that closed or replaced fd 4 gets its done
    # event written there, which ends the runner as any other event would.
    event_pipe = None
    # Displays given a place in the output so far (see `_send_event`).
    displays = 0


_state = _State()
_event_lock = threading.Lock()
_main_thread_id = threading.get_ident()


class _Uninterruptible:
    """A runner section a KeyboardInterrupt must not tear (an event line half written, an
    import half done): SIGINT during it is raised when it ends. Main thread only, since
    Python runs signal handlers there."""

    def __enter__(self):
        self.on_main = threading.get_ident() == _main_thread_id
        if self.on_main:
            _state.critical += 1

    def __exit__(self, *exc_info):
        if not self.on_main:
            return
        _state.critical -= 1
        if _state.deferred_interrupt and not _state.critical:
            _state.deferred_interrupt = False
            if _state.running and exc_info[0] is None:
                raise KeyboardInterrupt


def _send_event(event):
    """Writes one event line to the shim, in one piece. A display also gets its place in the
    output: a marker on the output pipe, written just before the event under the same lock,
    after which the shim's output thread sends it, so the output printed before and after
    it (read by another thread than the events) stays around it."""
    _emit_trailing()  # output the cell printed before the event stays before it
    # Lone surrogates would make invalid JSON for the shim: they become "?".
    line = json.dumps(event, ensure_ascii=False)
    placed = event.get("type") == "display" and _state.marker_fd is not None
    with _Uninterruptible(), _event_lock:
        _state.events += 1
        if placed:
            seq = _state.displays + 1
            marker = "\x1ecellvisor-sync:%s:%d:display\x1e" % (_state.sync_token, seq)
            try:
                _write_all(_state.marker_fd, marker.encode())
                _state.displays = seq
                line = line[:-1] + ', "seq": %d}' % seq
            except OSError:
                pass  # no output pipe: the display goes on its own
        data = memoryview((line + "\n").encode("utf-8", "replace"))
        try:
            while data:
                written = os.write(EVENT_FD, data)
                data = data[written:]
        except OSError:
            # The shim is gone (or a cell closed fd 4): nobody can hear us any more.
            os._exit(1)


def _command_pending():
    try:
        readable, _, _ = select.select([COMMAND_FD], [], [], 0)
        return bool(readable)
    except (OSError, ValueError):
        return False


def _on_sigint(signum, frame):
    if _state.running:
        if _state.critical:
            _state.deferred_interrupt = True
            return
        raise KeyboardInterrupt
    # Idle. A command already here or waiting means the interrupt is for that cell;
    # otherwise it is a late one for a cell that has finished, and is dropped.
    if _state.claimed or _command_pending():
        _state.early_interrupt = True


def _refuse_stdin(*args, **kwargs):
    raise StdinNotImplementedError(STDIN_MESSAGE)


class _NoStdin(io.TextIOBase):
    """sys.stdin for cells: any read fails with the message hosts look for."""

    encoding = "utf-8"
    read = _refuse_stdin
    readline = _refuse_stdin
    readlines = _refuse_stdin

    def readable(self):
        return True

    def isatty(self):
        return False

    def close(self):
        """`exit()` closes stdin before raising SystemExit; later reads must still give
        the stdin message."""


_NoStdin.__module__ = "__main__"


def _call_tool(name, args):
    """Asks the host to run tool `name` and waits for its answer on fd 3; returns
    (True, result) or (False, error message). An interrupt breaks the wait."""
    if threading.get_ident() != _main_thread_id:
        return False, "host tools can only be called from the cell's main thread"
    if not _state.running:
        return False, "host tools can only be called while a cell runs"
    _state.tool_calls += 1
    call_id = _state.tool_calls
    _flush_std()
    _send_event({"type": "tool_call", "id": _state.cell_id, "call_id": call_id, "name": name,
                 "args": args})
    while True:
        line = _commands.next_line(claim=False)
        if line is None:
            return False, "the host went away before answering"
        try:
            answer = json.loads(line)
        except ValueError:
            continue
        if (isinstance(answer, dict) and answer.get("type") == "tool_result"
                and answer.get("call_id") == call_id):
            break
    if answer.get("ok"):
        return True, answer.get("result")
    return False, str(answer.get("error") or "the tool failed without a message")


def _write_all(fd, data):
    data = memoryview(data)
    while data:
        written = os.write(fd, data)
        data = data[written:]


def _emit_trailing():
    """Writes the held trailing-value text now (something else is about to be output)."""
    text, _state.trailing = _state.trailing, b""
    if text:
        try:
            with _Uninterruptible():
                _write_all(_state.marker_fd, text)
        except OSError:
            pass  # the pipe is gone: so is everyone who could read it


def _flush_std():
    _emit_trailing()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass


def _hidden_frame(filename):
    if filename == RUNNER_FILE:
        return True
    shell = sys.modules.get("cellvisor_shell_ipython")
    if shell is not None and shell.own_frame(filename):
        return True  # IPython's shell running the cell
    asyncio = sys.modules.get("asyncio")
    if asyncio is not None:
        return filename.startswith(os.path.dirname(asyncio.__file__) + os.sep)
    return False


# Modules of ours a cell may run through (the prelude aside), loaded when first needed.
_OUR_MODULES = ("cellvisor_ipython", "cellvisor_exit", "cellvisor_notebook", "cellvisor_pretty",
                "cellvisor_magics", "cellvisor_inspector", "cellvisor_shell",
                "cellvisor_shell_ipython")


def _our_files():
    """The files of cellvisor's Python side, whose frames tracebacks leave out (`<cell 0>` is
    the line that runs a startup module)."""
    files = {RUNNER_FILE, "<cell 0>"}
    for module in (_prelude, *map(sys.modules.get, _OUR_MODULES)):
        name = getattr(module, "__file__", None)
        if name:
            files.add(name)
    return files


def _summary(error):
    kind = type(error)
    name = kind.__qualname__
    if kind.__module__ not in ("builtins", "__main__"):
        name = kind.__module__ + "." + name
    if isinstance(error, SyntaxError):
        message = error.msg or ""
    else:
        try:
            message = str(error)
        except Exception:
            message = "<exception str() failed>"
    message = message.strip().splitlines()[0] if message.strip() else ""
    return name + ": " + message if message else name


def _report_error(error, minimal=False):
    """Prints the traceback without the runner's own frames (only the exception line when
    `minimal`, IPython's `%xmode Minimal`); returns the summary."""
    import traceback

    tb = error.__traceback__
    while tb is not None and _hidden_frame(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    try:
        report = traceback.TracebackException(type(error), error, tb)
        # cellvisor's own frames (the runner's, a helper's) say nothing about the cell's
        # mistake: its message does.
        ours = _our_files()
        report.stack = traceback.StackSummary.from_list(
            [frame for frame in report.stack if frame.filename not in ours]
        )
        text = "".join(report.format())
        magics = sys.modules.get("cellvisor_magics")
        if minimal:
            text = "".join(report.format_exception_only())
        elif magics is not None:  # `%xmode Minimal`: the exception line only
            text = magics.traceback_text(error, text)
    except Exception:
        text = _summary(error) + "\n"
    _flush_std()
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except Exception:
        try:
            os.write(2, text.encode("utf-8", "backslashreplace"))
        except OSError:
            pass  # the cell closed stderr; the summary still reaches the shim
    return _summary(error)


def _run_code(code_object, namespace):
    result = eval(code_object, namespace)
    if code_object.co_flags & 0x80:  # inspect.CO_COROUTINE: top-level await
        result = _run_coroutine(result)
    return result


def _run_coroutine(coroutine):
    try:
        with _Uninterruptible():
            import asyncio
    except KeyboardInterrupt:
        coroutine.close()  # never started: no "never awaited" warning
        raise

    if _state.loop is None or _state.loop.is_closed():
        _state.loop = asyncio.new_event_loop()
    asyncio.set_event_loop(_state.loop)
    task = _state.loop.create_task(coroutine)
    try:
        return _state.loop.run_until_complete(task)
    except KeyboardInterrupt:
        if not task.done():
            task.cancel()
            try:
                _state.loop.run_until_complete(task)
            except BaseException:
                pass
        raise


def _run_shell_cell(cell_id, source, namespace):
    """Runs one cell in IPython's shell (see cellvisor_shell); returns (status, summary)."""
    namespace.pop("__warningregistry__", None)
    shell = sys.modules["cellvisor_shell_ipython"]
    try:
        try:
            result = shell.run(source, store_history=cell_id != 0)
        finally:
            if "cellvisor_exit" in sys.modules:  # raises exit()'s SystemExit if it was called
                sys.modules["cellvisor_exit"].end_cell()
        stop = sys.modules["cellvisor_shell"].active().cellvisor_stop
        if stop is not None:
            raise stop
        error = result.error_before_exec or result.error_in_exec
        _prelude.send_figures()
        return ("ok", None) if error is None else ("error", _summary(error))
    except BaseException as error:  # exit(1) and the like end the cell, not us
        return _ended_by(error)



def _ended_by(error):
    """How a cell that raised `error` ended, in either shell: an interrupt, `exit()` or
    `sys.exit(0)` (early and successful, its output and figures kept), or a failure."""
    if isinstance(error, KeyboardInterrupt):
        _state.running = False
        _flush_std()
        return "interrupted", None
    if isinstance(error, SystemExit) and (error.code is None or error.code == 0):
        _prelude.send_figures()
        return "ok", None
    return _failed(error)

def _run_cell(cell_id, source, namespace):
    """Runs one cell; returns (status, summary).

    The cell is compiled as one unit so that top-level `await` anywhere makes the whole
    cell one coroutine on the persistent loop; a trailing expression is rewritten into an
    assignment to a hidden name, whose value is then shown like IPython's Out.
    """
    if _shell is not None:
        return _run_shell_cell(cell_id, source, namespace)
    filename = "<cell %d>" % cell_id
    _keep_source(filename, source)
    # Like IPython: warnings' once-per-location registry starts afresh for each cell, as all
    # cells (and the functions they define) share one namespace and their lines overlap.
    namespace.pop("__warningregistry__", None)
    try:
        notebook = _import_beside("cellvisor_notebook")  # history, IPython syntax, pretty text
        source = notebook.begin_cell(cell_id, source, namespace)
        tree = compile(source, filename, "exec", _ast.PyCF_ONLY_AST, dont_inherit=True)
        has_value = bool(tree.body) and isinstance(tree.body[-1], _ast.Expr)
        if has_value and notebook.ends_with_semicolon(source, tree.body[-1]):
            has_value = False  # IPython's rule: a trailing `;` hides the value
        if has_value:
            last = tree.body[-1]
            target = _ast.Name(id=RESULT_NAME, ctx=_ast.Store())
            assign = _ast.Assign(targets=[target], value=last.value)
            for node in (target, assign):
                node.lineno, node.col_offset = last.lineno, last.col_offset
                node.end_lineno, node.end_col_offset = last.end_lineno, last.end_col_offset
            tree.body[-1] = assign
        if "try" in source or "exit__" in source:  # exit() ends the cell past handlers
            _import_beside("cellvisor_exit").guard_handlers(tree)
        code = compile(tree, filename, "exec", flags=_ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
        try:
            _run_code(code, namespace)
            value = namespace.get(RESULT_NAME)
        finally:
            shown = namespace.pop(RESULT_NAME, None)
            notebook.end_cell(shown is not None)  # extensions' post_execute callbacks
            if "cellvisor_exit" in sys.modules:  # raises exit()'s SystemExit if it was called
                sys.modules["cellvisor_exit"].end_cell()
        text = None if value is None else notebook.trailing(cell_id, value, namespace)
        if text is not None:
            _show_trailing_text(text)
        _prelude.send_figures()
        return "ok", None
    except BaseException as error:  # exit(1) and the like end the cell, not us
        return _ended_by(error)


def _show_trailing_text(text):
    """Prints the trailing value's text. While sys.stdout is the runner's own stream on the
    output pipe, the text is held and goes out with the cell's sync marker in one write (a
    quick cell then costs the shim one wake-up); anything output in between writes it first."""
    stream = sys.stdout
    if stream is sys.__stdout__ and getattr(stream, "encoding", None) == "utf-8":
        try:
            data = text.encode("utf-8")
            on_pipe = _state.output_pipe is not None and _fd_identity(1) == _state.output_pipe
        except (UnicodeEncodeError, OSError):
            on_pipe = False
        if on_pipe:
            _state.trailing += data
            return
    stream.write(text)


def _fd_identity(fd):
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def _events_intact():
    """Whether fd 4 is still the event pipe the runner started with."""
    try:
        return _fd_identity(EVENT_FD) == _state.event_pipe
    except OSError:
        return False


def _failed(error):
    """Reports the cell's failure; returns (status, summary)."""
    summary = _report_error(error)
    try:
        _prelude.send_figures()  # what the cell drew before failing
    except KeyboardInterrupt:
        pass
    return "error", summary


_kept_sources = {}  # filename -> size, oldest first
_kept_bytes = 0


def _keep_source(filename, source):
    """Puts a cell's source in linecache for its tracebacks, and forgets the oldest cells'
    sources past KEPT_CELL_SOURCES or KEPT_CELL_SOURCE_BYTES."""
    global _kept_bytes
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    _kept_sources[filename] = len(source)
    _kept_bytes += len(source)
    while len(_kept_sources) > 1 and (
        len(_kept_sources) > KEPT_CELL_SOURCES or _kept_bytes > KEPT_CELL_SOURCE_BYTES
    ):
        oldest = next(iter(_kept_sources))
        _kept_bytes -= _kept_sources.pop(oldest)
        linecache.cache.pop(oldest, None)


def _cwd_is_gone():
    """Whether the directory this process works in was removed (a workspace deleted and made
    again between two cells at the same path): the cell enters the new one then, though it
    asks for the same path as the last."""
    try:
        os.getcwd()
        return False
    except FileNotFoundError:
        return True


def _restore_std_streams():
    """A cell may have closed or moved fd 1 and 2 (`os.close(1)`) or closed sys.stdout: each
    cell starts with both on their pipes again, so one cell cannot break the session."""
    for pipe_fd, fd in ((_state.marker_fd, 1), (_state.error_fd, 2)):
        try:
            os.dup2(pipe_fd, fd)
        except OSError:
            pass
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name, None)
        if stream is None or getattr(stream, "closed", True):
            fd = 1 if name == "stdout" else 2
            fresh = io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding="utf-8",
                                     errors="backslashreplace", write_through=True)
            setattr(sys, name, fresh)
            setattr(sys, "__%s__" % name, fresh)


def _execute(cell_id, work):
    """Runs `work()` as cell (or state task) `cell_id`, where SIGINT raises
    KeyboardInterrupt; returns its (status, detail), ("interrupted", None) if interrupted."""
    _state.cell_id = cell_id
    outcome = ("interrupted", None)
    try:
        try:
            _state.running = True
            if _state.early_interrupt:
                _state.early_interrupt = False
                raise KeyboardInterrupt
            outcome = work()
        finally:
            _state.running = False
            _state.claimed = False
    except KeyboardInterrupt:
        # Landed in runner code between the cell's end and the flag going down.
        outcome = ("interrupted", None)
    _state.early_interrupt = False
    _state.deferred_interrupt = False
    return outcome


def _state_report(command, namespace):
    """("ok", report) of a state task, by the `cellvisor_state` module (imported on the
    first task); a failure of the module itself is reported, and the runner goes on."""
    try:
        with _Uninterruptible():
            module = _import_beside("cellvisor_state")
        return "ok", module.run(command, namespace)
    except Exception as error:
        return "ok", {"failed": _summary(error)}


def _state_task(task_id, command, namespace, marker_fd, token):
    """Saves, restores or lists the cells' names; answers with a `state` event carrying the
    report, then the marker and the `done` event a cell ends with. An interrupt stops it as
    it stops a cell."""
    _restore_std_streams()
    _state.events = 0
    status, report = _execute(task_id, lambda: _state_report(command, namespace))
    if report is not None:
        _send_event({"type": "state", "id": task_id, "report": report})
    marker = _sync(task_id, marker_fd, token)
    _send_event({"type": "done", "id": task_id, "status": status, "marker": marker})


def _sync(cell_id, marker_fd, token, status=None):
    """Flushes the cell's output and writes the marker the shim waits for, so the cell's
    output is all relayed before its done event. With `status` the marker is the done event
    itself (`...:<id>:<status>`), written together with the held trailing-value text."""
    text, _state.trailing = _state.trailing, b""
    _flush_std()
    if status is None:
        marker = "\x1ecellvisor-sync:%s:%d\x1e" % (token, cell_id)
    else:
        marker = "\x1ecellvisor-sync:%s:%d:%s\x1e" % (token, cell_id, status)
    try:
        with _Uninterruptible():
            _write_all(marker_fd, text + marker.encode())
        return True
    except OSError:
        return False


def _yield_control():
    """yield_control(): the host gets the cell's output so far now and the cell goes on. The
    output is flushed and followed by a marker for cell 0 (no cell has that id), which the
    shim turns into the yield in its place among the output; only when the marker cannot be
    written does the yield go as an event."""
    if _state.marker_fd is None or not _sync(0, _state.marker_fd, _state.sync_token):
        _send_event({"type": "yield", "id": _state.cell_id})


class _CommandReader:
    """Reads command lines from fd 3. It waits with select before reading, so that from
    the moment a command's bytes arrive until its cell ends an interrupt counts for that
    cell (see `_on_sigint`), even one landing between the read and the cell's start."""

    def __init__(self):
        self.buffer = bytearray()

    def next_line(self, claim=True):
        """The next line; `claim` says that arriving bytes are a new cell's command (false
        while a cell waits for a tool result)."""
        while True:
            newline = self.buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self.buffer[:newline])
                del self.buffer[: newline + 1]
                return line
            select.select([COMMAND_FD], [], [])
            if claim:
                _state.claimed = True
            # An interrupt between the read and the append would lose the bytes read.
            with _Uninterruptible():
                chunk = os.read(COMMAND_FD, 1 << 16)
                self.buffer += chunk
            if not chunk:
                return None


def _watch_parent(parent):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(1)


def _main_module():
    """The cells' namespace is a fresh `__main__` module (so pickle and `import __main__`
    see the cells' names), not the runner's own globals."""
    module = type(sys)("__main__")
    module.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = module
    return module.__dict__


def _import_beside(name):
    """Imports our module `name` from this file's directory (whatever the cwd holds). Its
    bytecode is cached there even under PYTHONDONTWRITEBYTECODE (the directory is ours):
    compiling the prelude costs ~10 ms a start, loading the cache ~0.5 ms."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    sys.path.insert(0, os.path.dirname(os.path.abspath(RUNNER_FILE)))
    dont_write = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        return __import__(name)
    finally:
        sys.dont_write_bytecode = dont_write
        del sys.path[0]


class _Host:
    """What the prelude needs from the runner."""

    send_event = staticmethod(_send_event)
    flush = staticmethod(_flush_std)
    call_tool = staticmethod(_call_tool)
    yield_control = staticmethod(_yield_control)
    import_beside = staticmethod(_import_beside)

    report_error = staticmethod(_report_error)
    show_trailing_text = staticmethod(_show_trailing_text)
    keep_source = staticmethod(_keep_source)

    @staticmethod
    def cell_id():
        return _state.cell_id


def _load_prelude():
    """Imports the prelude and lets it fill builtins."""
    prelude = _import_beside("cellvisor_prelude")
    prelude.install(_Host)
    return prelude


_commands = _CommandReader()
_prelude = None
_namespace = None
_shell = None  # IPython's InteractiveShell, where the cells run in it (see cellvisor_shell)


def _reap(pids):
    """Reaps children of ours that the shim killed with their cancelled cell (and that no
    one else can reap), so that none is left, even dead, for the next cell."""
    for pid in pids:
        try:
            os.waitpid(int(pid), os.WNOHANG)
        except (OSError, ValueError, TypeError):
            pass
    # Not a cell: an interrupt that came meanwhile was a late one for the cancelled cell,
    # unless a command is already waiting (see `_on_sigint`).
    _state.claimed = False
    if not _command_pending():
        _state.early_interrupt = False


def prepare():
    """Loads what every runner holds before its first cell: the prelude in builtins and the
    cells' namespace. A zygote calls it once and forks runners that start from here."""
    global _prelude, _namespace, _shell
    # Figures render off-screen (and are sent as PNG) unless the user chose a backend.
    if not os.environ.get("MPLBACKEND"):
        os.environ["MPLBACKEND"] = "Agg"
    if _prelude is None:
        _prelude = _load_prelude()
        _namespace = _main_module()
        shells = _import_beside("cellvisor_shell")
        with _Uninterruptible():
            _shell = shells.prepare(sys.modules["__main__"], _Host)


def main():
    token = os.environ.pop("CELLVISOR_SYNC_TOKEN", "")
    prepare()
    os.set_inheritable(COMMAND_FD, False)
    os.set_inheritable(EVENT_FD, False)
    marker_fd = os.dup(1)  # not inheritable; survives cells that close or move fd 1
    _state.marker_fd, _state.sync_token = marker_fd, token
    _state.error_fd = os.dup(2)
    _state.output_pipe = _fd_identity(marker_fd)
    _state.event_pipe = _fd_identity(EVENT_FD)
    sys.path[0] = ""  # like an interactive session: the cwd, not the runner's directory
    signal.signal(signal.SIGINT, _on_sigint)
    if not sys.platform.startswith("linux"):
        # On Linux the shim (or the zygote) gave us a parent-death signal before we ran: a
        # watching thread would only cost a thread start and two wakeups a second.
        threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    sys.stdin = _NoStdin()
    builtins.input = _refuse_stdin
    namespace = _namespace
    commands = _commands
    name = "PyPy" if sys.implementation.name == "pypy" else "Python"
    version = "%d.%d.%d" % sys.version_info[:3]
    shell = sys.modules["cellvisor_shell"].describe()
    _send_event({"type": "ready", "version": "%s %s (%s)" % (name, version, shell),
                 "executable": sys.executable})
    notice = sys.modules["cellvisor_shell"].notice()
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_mark_forked_copy)
    while True:
        try:
            line = commands.next_line()
            if line is None:
                return
            try:
                command = json.loads(line)
                if command.get("type") == "reap":
                    _reap(command.get("pids") or ())
                    continue
                if command.get("type") in STATE_TASKS:
                    _state_task(int(command["id"]), command, namespace, marker_fd, token)
                    continue
                if command.get("type", "execute") != "execute":
                    raise ValueError("not a cell")  # a late answer to an abandoned tool call
                cell_id, source = int(command["id"]), str(command["code"])
                tools = command.get("tools") or []
                cwd = command.get("cwd")
                session_env = {str(k): str(v) for k, v in (command.get("env") or {}).items()}
                unset = [str(name) for name in (command.get("unset") or ())]
            except (ValueError, KeyError, TypeError, AttributeError):
                _state.claimed = False
                continue
            # The session's variables (name, store directory), sent with a worker's first
            # cell: a worker started ahead of its session learns them here; and the caller's
            # environment where it changed.
            os.environ.update(session_env)
            if "TMPDIR" in session_env and "tempfile" in sys.modules:
                # A prewarmed worker's first cell: its session's own temporary directory
                # wins over the one tempfile may have cached at start.
                sys.modules["tempfile"].tempdir = None
            for name in unset:
                os.environ.pop(name, None)
            if cwd and (cwd != _state.requested_cwd or _cwd_is_gone()):
                _state.requested_cwd = cwd
                try:
                    os.chdir(cwd)
                except OSError:
                    pass  # the shim entered it a moment ago; the cell runs where python is
            _restore_std_streams()
            _prelude.begin_cell(tools)
            _state.events = 0
            if notice and cell_id:  # the first cell says why its shell is not the one asked
                _send_event({"type": "notice", "message": notice})
                notice = None
            try:
                status, summary = _execute(
                    cell_id, lambda: _run_cell(cell_id, source, namespace))
            except Exception as error:  # the runner's own reporting failed; keep serving
                status, summary = "error", _summary(error)
            if _state.forked_copy:
                _end_forked_copy(status)
            if summary is None and not _state.events and _events_intact() \
                    and _sync(cell_id, marker_fd, token, status):
                continue  # the done marker was the cell's end
            marker = _sync(cell_id, marker_fd, token)
            done = {"type": "done", "id": cell_id, "status": status, "marker": marker}
            if summary is not None:
                done["summary"] = summary
            _send_event(done)
        except KeyboardInterrupt:
            if _state.forked_copy:
                _end_forked_copy("interrupted")
            continue


def _mark_forked_copy():
    _state.forked_copy = True


def _end_forked_copy(status):
    """A process the cell forked (`os.fork()` with no exec or exit of its own) came back here
    when its copy of the cell's code ended: it is not the runner, and must neither mark the
    cell done nor read the runner's commands. It ends as a child whose code ran out does,
    with what it printed flushed and its trailing value dropped."""
    _state.trailing = b""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(0 if status == "ok" else 1)


if __name__ == "__main__":
    main()
