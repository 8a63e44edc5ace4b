"""cellvisor's Python zygote: a runner loaded once (prelude, cells' namespace, the operator's
preloaded modules), frozen for the garbage collector, that then makes new Python workers by
forking instead of starting an interpreter.

The supervisor holds the other end of fd 3, a SOCK_SEQPACKET socket: one request a packet,
a JSON object with the stderr pipe of the worker to make as its one passed descriptor.
For each request the zygote makes the process the supervisor would have spawned:

  zygote --clone(CLONE_PARENT)--> worker   (a child of the supervisor, as a spawned one is)
  worker --fork--> runner                  (python, already warm, under the worker)
  worker --exec--> the worker program      (the Rust shim, which adopts the runner)

so the tree stays supervisor -> worker -> python, with the worker a subreaper owning
everything its cells start, exactly as when the worker starts python itself. The reply is
`{"pid": <worker pid>}` or `{"error": "..."}`.

What the forked runners share: the hash seed (one per zygote) and the state of the preloaded
modules at the fork. Everything else is theirs: the environment (replaced before any cell),
the working directory, the rlimits, the random state (reseeded after the fork).
"""

import ctypes
import fcntl
import gc
import json
import os
import platform
import signal
import socket
import sys
import traceback

CONTROL_FD = 3
# The worker's ends of the runner's pipes land here across the exec, named in its
# environment (fds 3 and 4 of the worker are its own business).
WORKER_FDS_FROM = 10
CLONE_PARENT = 0x00008000
PR_SET_PDEATHSIG = 1
SYS_CLONE = {"x86_64": 56, "amd64": 56, "aarch64": 220, "arm64": 220}
FORKED_PYTHON_VAR = "CELLVISOR_FORKED_PYTHON"
MAX_REQUEST = 1 << 20

_libc = ctypes.CDLL(None, use_errno=True)


def _clone_parent():
    """A copy of this process whose parent is our parent (the supervisor): the worker it
    becomes is the supervisor's child, reaped and signalled like one it spawned."""
    number = SYS_CLONE.get(platform.machine().lower())
    if number is None:
        raise OSError("no clone system call number for " + platform.machine())
    pid = _libc.syscall(ctypes.c_long(number), ctypes.c_ulong(CLONE_PARENT | signal.SIGCHLD),
                        ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0),
                        ctypes.c_ulong(0))
    if pid < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    return pid


def _die_with_parent(signum, parent):
    if _libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0 or os.getppid() != parent:
        os._exit(1)


# The numeric libraries start a pool of threads when they load unless told not to; a process
# with threads other than the caller's cannot be cloned safely (the copy inherits their locks
# and state but not the threads), so preloading runs with these at one thread.
SINGLE_THREADED = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                   "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "GOTO_NUM_THREADS")


def _threads():
    """This process's thread count, as the kernel sees it."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 1


def _preload(modules):
    saved = {name: os.environ.get(name) for name in SINGLE_THREADED}
    os.environ.update({name: "1" for name in SINGLE_THREADED})
    try:
        return _import_all(modules)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _import_all(modules):
    loaded, failed = [], []
    for name in modules:
        before = set(sys.modules)
        try:
            __import__(name)
            loaded.append(name)
        except BaseException as error:  # a module's import may raise anything
            failed.append({"module": name, "error": "%s: %s" % (type(error).__name__, error)})
            # A half-imported package would be every session's: a session imports it afresh.
            for partial in set(sys.modules) - before:
                sys.modules.pop(partial, None)
    return loaded, failed


def _reseed():
    """A forked runner draws its own random streams: `random` is reseeded by its own
    at-fork hook, numpy's global generator here."""
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        try:
            numpy_random.seed()
        except Exception:
            pass


def _notice(failed):
    if not failed:
        return ""
    lines = ["[cellvisor: [python] preload: %s could not be imported (%s)]\n"
             % (f["module"], f["error"]) for f in failed]
    return "".join(lines)


def _place(moves):
    """dup2s each (source, target) pair, first copying every source above the targets so
    that no move clobbers a source still to be moved; the copies are closed after."""
    high = [fcntl.fcntl(source, fcntl.F_DUPFD_CLOEXEC, 64) for source, _ in moves]
    for copy, (_, target) in zip(high, moves):
        os.dup2(copy, target)  # inheritable
    for copy in high:
        os.close(copy)


def _close_all_but(keep):
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own descriptor


def _become_runner(fds, environment, notice):
    """The forked python: its pipes on 1-4, the session's environment, then the runner."""
    null = os.open(os.devnull, os.O_RDONLY)
    _place(list(zip((null,) + tuple(fds), (0, 1, 2, 3, 4))))
    _close_all_but({0, 1, 2, 3, 4})
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.environ.clear()
    os.environ.update(environment)
    _reseed()
    if notice:
        os.write(1, notice.encode("utf-8", "replace"))
    import cellvisor_runner
    cellvisor_runner.main()


def _become_worker(request, stderr_fd, notice):
    """In the clone: becomes the worker the supervisor asked for, with its runner forked
    under it. Never returns."""
    try:
        _die_with_parent(signal.SIGTERM, int(request["supervisor"]))
        os.setpgid(0, 0)
        for resource, soft, hard in request.get("rlimits") or ():
            import resource as _resource
            _resource.setrlimit(int(resource), (int(soft), int(hard)))
        if request.get("cwd"):
            os.chdir(request["cwd"])
        null = os.open(os.devnull, os.O_RDWR)
        _place([(null, 0), (null, 1), (stderr_fd, 2)])
        os.close(CONTROL_FD)
        pipes = [os.pipe() for _ in range(4)]  # output, errors, commands, events
        (out_r, out_w), (err_r, err_w), (cmd_r, cmd_w), (ev_r, ev_w) = pipes
        token = os.urandom(16).hex()
        environment = dict(request["python_env"])
        environment["CELLVISOR_SYNC_TOKEN"] = token
        parent = os.getpid()
        runner = os.fork()
        if runner == 0:
            try:
                _die_with_parent(signal.SIGKILL, parent)
                _become_runner((out_w, err_w, cmd_r, ev_w), environment, notice)
            finally:
                os._exit(1)
        ours = tuple(range(WORKER_FDS_FROM, WORKER_FDS_FROM + 4))
        _place(list(zip((out_r, err_r, cmd_w, ev_r), ours)))
        _close_all_but({0, 1, 2} | set(ours))
        worker_env = dict(request["worker_env"])
        worker_env[FORKED_PYTHON_VAR] = ",".join(
            [str(runner)] + [str(fd) for fd in ours] + [token, request["program"]])
        argv = request["argv"]
        os.execve(argv[0], argv, worker_env)
    except BaseException:
        try:
            os.write(2, ("cellvisor zygote: cannot make the worker: %s"
                         % traceback.format_exc()).encode("utf-8", "replace"))
        except OSError:
            pass
    os._exit(127)


def _serve(control, notice):
    while True:
        try:
            data, ancillary, _flags, _address = control.recvmsg(
                MAX_REQUEST, socket.CMSG_SPACE(4 * 4))
        except InterruptedError:
            continue
        if not data:
            return  # the supervisor is gone
        fds = []
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                count = len(payload) // 4
                fds.extend(int.from_bytes(payload[i * 4:i * 4 + 4], sys.byteorder)
                           for i in range(count))
        try:
            request = json.loads(data)
            threads = _threads()
            if threads > 1:
                raise RuntimeError("the zygote runs %d threads; it forks only with one" % threads)
            if len(fds) != 1:
                raise ValueError("a request passes exactly one descriptor, %d came" % len(fds))
            pid = _clone_parent()
            if pid == 0:
                _become_worker(request, fds[0], notice)
            reply = {"pid": pid}
            notice = ""  # the first session hears of failed preloads, the next ones do not
        except Exception as error:
            reply = {"error": "%s: %s" % (type(error).__name__, error)}
        finally:
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
        control.send(json.dumps(reply).encode())


def main():
    control = socket.socket(fileno=CONTROL_FD)
    control.setblocking(True)
    os.set_inheritable(CONTROL_FD, False)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import cellvisor_runner
    cellvisor_runner.prepare()
    modules = [m for m in os.environ.pop("CELLVISOR_PRELOAD", "").split(",") if m]
    loaded, failed = _preload(modules)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    gc.collect()
    if hasattr(gc, "freeze"):
        gc.freeze()  # the forked runners' collections leave the shared pages alone
    name = "PyPy" if sys.implementation.name == "pypy" else "Python"
    ready = {
        "type": "ready",
        "version": name + " " + "%d.%d.%d" % sys.version_info[:3],
        "executable": sys.executable,
        "preloaded": loaded,
        "failed": failed,
        "threads": _threads(),
    }
    control.send(json.dumps(ready).encode())
    _serve(control, _notice(failed))
