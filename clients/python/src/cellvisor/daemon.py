"""Finding and starting daemons: the default socket as cellvisor computes it, `autostart`
(`cellvisor serve` started as the CLI starts it), and `Daemon`, a private daemon in a
temporary directory for tests and benchmarks that must never meet the user's own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, Optional

from .errors import CellvisorError, DaemonNotRunning, StartError

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

#: How long a freshly started daemon may take to listen (the CLI's bound).
START_WITHIN = 15.0

#: How long a daemon has to answer `initialize` on a new connection when
#: $CELLVISOR_HEALTH_TIMEOUT does not say (the CLI's bound).
HEALTH_WITHIN = 10.0


def health_timeout(given: Optional[float] = None) -> float:
    """The health handshake's bound: `given`, else $CELLVISOR_HEALTH_TIMEOUT (seconds),
    else `HEALTH_WITHIN`."""
    if given is not None:
        chosen = given
    else:
        text = os.environ.get("CELLVISOR_HEALTH_TIMEOUT")
        if not text:
            return HEALTH_WITHIN
        try:
            chosen = float(text)
        except ValueError:
            chosen = -1.0
    if not 0 < chosen <= 3600:
        raise ValueError(f"the health timeout must be a number of seconds from 0 to 3600, got {given if given is not None else text!r} "
                         f"(CELLVISOR_HEALTH_TIMEOUT, default {HEALTH_WITHIN:g})")
    return chosen


def unresponsive_message(where: str, within: float) -> str:
    """What an unresponsive daemon's error says: what was tried, and what to do."""
    return (f"the cellvisor daemon at {where} accepted the connection but did not answer `initialize` within "
            f"{within:g} s: the process holding it may be stopped or hung. `cellvisor eval` replaces it when it can "
            f"prove it is that socket's cellvisor daemon; otherwise stop that process (or remove the socket if nothing "
            f"should listen there), or use another socket; CELLVISOR_HEALTH_TIMEOUT sets the wait in seconds")


def default_socket() -> str:
    """The daemon's socket: $CELLVISOR_SOCKET, else `$XDG_RUNTIME_DIR/cellvisor/daemon.sock`,
    else `<tmp>/cellvisor-<uid>/daemon.sock` (a `[daemon] socket` in the config file is not
    read here: pass its path)."""
    if os.environ.get("CELLVISOR_SOCKET"):
        return os.environ["CELLVISOR_SOCKET"]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        base = os.path.join(runtime, "cellvisor")
    else:
        base = os.path.join(tempfile.gettempdir(), f"cellvisor-{os.getuid()}")
    return os.path.join(base, "daemon.sock")


def bundled_program() -> Optional[str]:
    """The `cellvisor` program the wheel installed beside this interpreter (the scripts
    directory of this environment, or of the user's site for `pip install --user`), when
    there is one: the daemon of this client's own release."""
    places = [lambda: sysconfig.get_path("scripts"), lambda: sysconfig.get_path("scripts", f"{os.name}_user")]
    for place in places:
        try:
            scripts = place()
        except KeyError:
            continue
        candidate = os.path.join(scripts, "cellvisor")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def find_program(program: Optional[str]) -> str:
    """The cellvisor executable to start: `program`, else $CELLVISOR_BIN, else the one the
    wheel installed beside this interpreter, else on PATH."""
    chosen = program or os.environ.get("CELLVISOR_BIN") or bundled_program() or shutil.which("cellvisor")
    if not chosen:
        raise StartError("cannot start a daemon: no cellvisor executable (give program=, set CELLVISOR_BIN, "
                         "install the wheel that carries it, or put cellvisor on PATH)")
    return chosen


@dataclass
class Started:
    """A daemon `autostart` started: its process (reaped by a thread of its own, since it
    outlives the request that started it), the program and its log."""

    process: "subprocess.Popen[bytes]"
    program: str
    log: str

    @property
    def pid(self) -> int:
        return self.process.pid


def start(socket: str, program: Optional[str], config: Optional[str], log: Optional[str]) -> Started:
    """Starts `program serve --socket socket [--config config]` detached (a session of its
    own, no terminal), its output appended to `log` (default: next to the socket, `.log`)."""
    executable = find_program(program)
    directory = os.path.dirname(os.path.abspath(socket))
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError as error:
        raise StartError(f"cannot make the socket's directory {directory}: {error}") from None
    log = log or os.path.splitext(socket)[0] + ".log"
    command = [executable, "serve", "--socket", socket]
    if config is not None:
        command += ["--config", config]
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError as error:
        raise StartError(f"cannot open the daemon's log {log}: {error}") from None
    try:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, start_new_session=True)
    except OSError as error:
        raise StartError(f"cannot run {executable}: {error}") from None
    finally:
        os.close(fd)
    threading.Thread(target=process.wait, name=f"cellvisor-reaper-{process.pid}", daemon=True).start()
    return Started(process, executable, log)


def tail(path: str, lines: int = 5) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).strip()
    except OSError:
        return ""


def check_start(started: Started, deadline: float, within: float) -> None:
    """Raises `StartError` when the started daemon is gone or late; else returns (retry)."""
    code = started.process.poll()
    if code is not None:
        raise StartError(f"the daemon ({started.program} serve) exited with status {code} before listening; "
                         f"its log {started.log} ends: {tail(started.log) or '(empty)'}")
    if time.monotonic() > deadline:
        raise StartError(f"the daemon ({started.program} serve, pid {started.pid}) did not listen within "
                         f"{within:.0f} s; see its log {started.log}")


def wait_for(socket: str, process: Optional["subprocess.Popen[bytes]"] = None, within: float = 20.0,
             timeout: Optional[float] = None) -> "Client":
    """A `Client` of the daemon that is starting on `socket`: retries every 2 ms until it
    answers, for at most `within` seconds or until `process` has exited."""
    from .client import Client

    deadline = time.monotonic() + within
    while True:
        try:
            return Client(socket, timeout)
        except DaemonNotRunning:
            if (process is not None and process.poll() is not None) or time.monotonic() > deadline:
                raise StartError(f"no daemon answers at {socket}") from None
            time.sleep(0.002)


class Daemon:
    """`cellvisor serve` run from `binary` with the config `config_text`, in a private
    temporary directory (`dir`: its config, its log `daemon.log` and its runtime directory
    `run_dir`, which every process it starts inherits as XDG_RUNTIME_DIR), so that it never
    meets the user's daemon. `private_dirs` gives it its own XDG_STATE_HOME and
    XDG_CONFIG_HOME too (none of the user's session stores or startup scripts); `env` adds
    variables (None removes one); `new_session` starts it in a process group of its own.
    `client` is its first connection (initialized); `stop()` ends it by pid."""

    def __init__(self, binary: str, config_text: str = "", prefix: str = "cellvisor-daemon-",
                 private_dirs: bool = False, env: Optional[Dict[str, Optional[str]]] = None,
                 new_session: bool = False) -> None:
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.run_dir = os.path.join(self.dir, "run")
        os.mkdir(self.run_dir, 0o700)
        self.socket = os.path.join(self.run_dir, "daemon.sock")
        self.config = os.path.join(self.dir, "config.toml")
        with open(self.config, "w") as f:
            f.write(config_text)
        environment = {k: v for k, v in os.environ.items() if k not in ("CELLVISOR_SOCKET", "CELLVISOR_CONFIG")}
        environment["XDG_RUNTIME_DIR"] = self.run_dir
        # Its sessions' snapshots stay with it: a later daemon never restores this one's.
        environment["CELLVISOR_SNAPSHOTS__DIR"] = os.path.join(self.dir, "snapshots")
        if private_dirs:
            environment["XDG_STATE_HOME"] = os.path.join(self.dir, "state")
            environment["XDG_CONFIG_HOME"] = os.path.join(self.dir, "config")
        for name, value in (env or {}).items():
            if value is None:
                environment.pop(name, None)
            else:
                environment[name] = value
        self.client: Optional["Client"] = None
        self.log = open(os.path.join(self.dir, "daemon.log"), "wb")
        self.process = subprocess.Popen(
            [os.path.abspath(binary), "--config", self.config, "serve", "--socket", self.socket],
            cwd=self.dir, env=environment, stdin=subprocess.DEVNULL, stdout=self.log,
            stderr=subprocess.STDOUT, start_new_session=new_session)
        try:
            self.client = wait_for(self.socket, self.process, within=30)
            self.client.call("initialize")
        except CellvisorError as error:
            # A daemon that bound its socket and then refused to start (a bad config, a runtime
            # directory too long): its log says why, and the directory goes with `stop`.
            log = os.path.join(self.dir, "daemon.log")
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                pass
            why = tail(log)
            self.stop()
            raise StartError(f"the daemon ({binary}) did not start: {error}; its log ended: {why or '(empty)'}") \
                from error
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self.process.pid

    def connect(self, timeout: Optional[float] = None) -> "Client":
        """Another connection to this daemon."""
        from .client import Client

        return Client(self.socket, timeout)

    def stop(self, timeout: float = 20) -> bool:
        """Asks the daemon to shut down and waits for it, kills it (by pid) if it will not,
        and removes its directory; answers whether it stopped by itself."""
        clean = True
        if self.process.poll() is None:
            try:
                with self.connect(timeout) as client:
                    client.call("shutdown")
            except (OSError, RuntimeError, CellvisorError):
                pass  # gone already, or going: the wait below tells
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                clean = False
                self.process.kill()
                self.process.wait()
        self.remove()
        return clean

    def remove(self) -> None:
        """Closes the connection and the log and removes the directory (again: no-op)."""
        if self.client is not None:
            self.client.close()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
