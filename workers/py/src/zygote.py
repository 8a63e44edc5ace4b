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

A request with `"uid": N` (the `uid` isolation level) makes the clone drop its supplementary
groups and become uid and gid N (real, effective and saved) before it enters the session's
directory or forks the runner, so nothing of the session ever runs as the zygote's user.

A sandboxed session's request says `"confine": true`: its runner then waits, before it runs
anything of the session, for the worker (once exec'd) to hand it the Landlock ruleset the
worker built for itself from the session's rules, and restricts itself with it (no new
privileges, CAP_SYS_PTRACE dropped, `landlock_restrict_self`), exiting on any failure. The
zygote itself stays unconfined: it only forks.

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
# The same number on every architecture (the unified table of newer system calls).
SYS_LANDLOCK_RESTRICT_SELF = 446
PR_SET_NO_NEW_PRIVS = 38
PR_GET_NO_NEW_PRIVS = 39
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_LOWER = 3
CAP_SETPCAP = 8
CAP_SYS_PTRACE = 19
LINUX_CAPABILITY_VERSION_3 = 0x20080522
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


def _capabilities():
    """This process's capability sets from /proc/self/status, by name (CapEff, ...)."""
    sets = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name.startswith("Cap"):
                sets[name] = int(value.strip(), 16)
    return sets


def _drop_ptrace():
    """Gives up CAP_SYS_PTRACE (with which root reads any process's environ) in every set,
    as a confined worker does; checked after."""
    _libc.prctl(PR_CAPBSET_DROP, CAP_SYS_PTRACE, 0, 0, 0)  # needs CAP_SETPCAP: checked below
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_LOWER, CAP_SYS_PTRACE, 0, 0)
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # two of (effective, permitted, inheritable)
    if _libc.capget(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capget: " + os.strerror(ctypes.get_errno()))
    bit = 1 << CAP_SYS_PTRACE
    if any(data[i] & bit for i in range(3)):
        for i in range(3):
            data[i] &= ~bit
        if _libc.capset(header, data) != 0:
            raise OSError(ctypes.get_errno(), "capset: " + os.strerror(ctypes.get_errno()))
    sets = _capabilities()
    for name in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        if sets.get(name, 0) & bit:
            raise OSError("CAP_SYS_PTRACE is still in " + name)
    if sets.get("CapBnd", 0) & bit and sets.get("CapEff", 0) & (1 << CAP_SETPCAP):
        raise OSError("CAP_SYS_PTRACE is still in the bounding set")


def _confine_runner(fd):
    """In the forked runner, before anything of the session: waits for the worker's
    ruleset on `fd`, restricts this process with it and says `confined`; on any failure says
    why and exits, never running unconfined."""
    channel = socket.socket(fileno=fd)
    try:
        data, ancillary, _flags, _address = channel.recvmsg(64, socket.CMSG_SPACE(4 * 4))
        received = []
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                received.extend(int.from_bytes(payload[i * 4:i * 4 + 4], sys.byteorder)
                                for i in range(len(payload) // 4))
        if not data:
            os._exit(1)  # the worker went away without confining us
        if not ((data == b"landlock" and len(received) == 1)
                or (data == b"none" and not received)):
            raise ValueError("unexpected confinement message %r with %d descriptors"
                             % (data[:32], len(received)))
        _drop_ptrace()
        if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "no_new_privs: " + os.strerror(ctypes.get_errno()))
        if received:
            done = _libc.syscall(ctypes.c_long(SYS_LANDLOCK_RESTRICT_SELF),
                                 ctypes.c_int(received[0]), ctypes.c_uint(0))
            if done != 0:
                errno = ctypes.get_errno()
                raise OSError(errno, "landlock_restrict_self: " + os.strerror(errno))
            os.close(received[0])
        # (Its own /proc directory is out of reach now: the rules name the worker's.)
        if _libc.prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1:
            raise OSError("no_new_privs is not set")
        channel.sendall(b"confined")
        channel.close()
    except BaseException as error:
        try:
            channel.sendall(("%s: %s" % (type(error).__name__, error)).encode("utf-8", "replace"))
        except OSError:
            pass
        os._exit(1)


def _become_runner(fds, environment, notice, confine):
    """The forked python: its pipes on 1-4, confined when `confine` (its end of the
    confinement channel) is given, the session's environment, then the runner."""
    null = os.open(os.devnull, os.O_RDONLY)
    keep = {0, 1, 2, 3, 4}
    if confine is not None:
        # Out of the way of the pipes' places, and kept through the cleanup below.
        high = fcntl.fcntl(confine, fcntl.F_DUPFD_CLOEXEC, 64)
        os.close(confine)
        confine = high
        keep.add(confine)
    _place(list(zip((null,) + tuple(fds), (0, 1, 2, 3, 4))))
    _close_all_but(keep)  # reads /proc/self/fd: before the confinement, which hides it
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if confine is not None:
        _confine_runner(confine)
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
        os.setpgid(0, 0)
        for resource, soft, hard in request.get("rlimits") or ():
            import resource as _resource
            _resource.setrlimit(int(resource), (int(soft), int(hard)))
        uid = request.get("uid")
        if uid is not None:
            # The session's own uid and gid, no supplementary groups, before anything of the
            # session (its directory, its runner) and for good (real, effective and saved).
            uid = int(uid)
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            if os.getresuid() != (uid, uid, uid) or os.getresgid() != (uid, uid, uid) \
                    or os.getgroups():
                raise OSError("could not become uid %d" % uid)
        # After the change of uid, which clears the parent-death signal.
        _die_with_parent(signal.SIGTERM, int(request["supervisor"]))
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
        confine = None  # (worker's end, runner's end) of the confinement channel
        if request.get("confine") is True:
            worker_end, runner_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            confine = (worker_end.detach(), runner_end.detach())
        parent = os.getpid()
        runner = os.fork()
        if runner == 0:
            try:
                _die_with_parent(signal.SIGKILL, parent)
                runner_end = None
                if confine is not None:
                    os.close(confine[0])
                    runner_end = confine[1]
                _become_runner((out_w, err_w, cmd_r, ev_w), environment, notice, runner_end)
            finally:
                os._exit(1)
        ours = tuple(range(WORKER_FDS_FROM, WORKER_FDS_FROM + 4))
        moves = list(zip((out_r, err_r, cmd_w, ev_r), ours))
        confine_field = "-"
        if confine is not None:
            os.close(confine[1])
            moves.append((confine[0], WORKER_FDS_FROM + 4))
            confine_field = str(WORKER_FDS_FROM + 4)
        _place(moves)
        _close_all_but({0, 1, 2} | {target for _, target in moves})
        worker_env = dict(request["worker_env"])
        worker_env[FORKED_PYTHON_VAR] = ",".join(
            [str(runner)] + [str(fd) for fd in ours]
            + [confine_field, token, request["program"]])
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
    # One buffer for every request: a fresh megabyte per request would be mapped, touched
    # and unmapped each time.
    buffer = bytearray(MAX_REQUEST)
    while True:
        try:
            size, ancillary, flags, _address = control.recvmsg_into(
                [buffer], socket.CMSG_SPACE(4 * 4))
        except InterruptedError:
            continue
        if not size:
            return  # the supervisor is gone
        data = bytes(buffer[:size])
        fds = []
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                count = len(payload) // 4
                fds.extend(int.from_bytes(payload[i * 4:i * 4 + 4], sys.byteorder)
                           for i in range(count))
        try:
            if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                raise ValueError("a request over %d bytes, or passing more than 4 descriptors"
                                 % MAX_REQUEST)
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
