#!/usr/bin/env python3
"""The one Python client of the cellvisor daemon (standard library only on the Unix socket).

Every script here speaks to the daemon through this module: `Client` is one connection to
its JSON-RPC Unix socket (newline-delimited JSON-RPC 2.0, docs/protocol.md), or to its
network listener's WebSocket (`url="wss://host:7420"` with a token and a CA file; one
JSON-RPC message per text frame, docs/network.md; needs the `websockets` package), `connect`
waits for a daemon that is starting, and `Daemon` runs `cellvisor serve` in a private
directory for the scripts that measure or abuse it. Run as a program, it runs cells and
prints their output as it streams:

    python3 scripts/cellvisor_client.py --session demo py 'x = 41' py 'print(x + 1)' js '6 * 7'
    python3 scripts/cellvisor_client.py --url wss://127.0.0.1:7420 --token-file token \
        --cafile cert.pem py 'print(6 * 7)'

Start the daemon first (`cellvisor serve`, or any `cellvisor eval`, which starts one).
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time


def default_socket():
    """The daemon's default socket, as cellvisor computes it."""
    if os.environ.get("CELLVISOR_SOCKET"):
        return os.environ["CELLVISOR_SOCKET"]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        base = os.path.join(runtime, "cellvisor")
    else:
        base = os.path.join(tempfile.gettempdir(), f"cellvisor-{os.getuid()}")
    return os.path.join(base, "daemon.sock")


class RpcError(RuntimeError):
    """The daemon answered a request with a JSON-RPC error (`code`, `message`)."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class ConnectError(RuntimeError):
    """The daemon on the network could not be reached or refused the connection; the message
    says which of the URL, the token, TLS or the host was wrong."""


# The largest message taken from the daemon over the WebSocket (results can be large).
MAX_MESSAGE_BYTES = 256 * 1024 * 1024


class _Unix:
    """Newline-delimited JSON-RPC on the daemon's Unix socket."""

    def __init__(self, path, timeout):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.settimeout(timeout)
            self.sock.connect(path)
        except BaseException:
            self.sock.close()
            raise
        self.lines = self.sock.makefile("rb")

    def send(self, text):
        self.sock.sendall(text.encode() + b"\n")

    def messages(self):
        # Not `yield from self.lines`: closing this generator would close the file too.
        while True:
            line = self.lines.readline()
            if not line:
                return
            yield line

    def close(self):
        try:
            self.lines.close()
            self.sock.close()
        except OSError:
            pass


class _WebSocket:
    """JSON-RPC on the daemon's `/v1/rpc` WebSocket, one message per text frame."""

    def __init__(self, url, token, token_source, cafile, session, timeout):
        try:
            from websockets.exceptions import InvalidHandshake, InvalidStatus, InvalidURI
            from websockets.sync.client import connect as ws_connect
        except ImportError:
            raise ConnectError("a daemon URL needs the `websockets` package (pip install websockets)") from None
        scheme, sep, rest = url.partition("://")
        if not sep or scheme.lower() not in ("ws", "wss"):
            raise ConnectError(f"bad daemon URL {url!r}: the scheme must be ws or wss (wss://HOST:PORT)")
        if "/" not in rest:
            url = url + "/v1/rpc"
        headers = {}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        if session is not None:
            headers["Cellvisor-Session"] = session
        context = None
        if scheme.lower() == "wss":
            import ssl
            context = ssl.create_default_context(cafile=cafile)
        self.timeout = timeout
        try:
            self.ws = ws_connect(url, additional_headers=headers, ssl=context, max_size=MAX_MESSAGE_BYTES,
                                 open_timeout=timeout if timeout is not None else 15)
        except InvalidStatus as error:
            status = error.response.status_code
            if status == 401:
                if token is None:
                    raise ConnectError(f"the daemon at {url} requires a token (401) and no token was given "
                                       "(token= or token_file=)") from None
                raise ConnectError(f"the daemon at {url} refused the token from {token_source} (401): "
                                   "it is not the daemon's token") from None
            body = error.response.body.decode(errors="replace").strip()
            raise ConnectError(f"the daemon at {url} refused the connection: {status} {body}") from None
        except InvalidURI as error:
            raise ConnectError(f"bad daemon URL {url!r}: {error}") from None
        except InvalidHandshake as error:  # e.g. closed before answering (a router with no node up)
            raise ConnectError(f"the WebSocket handshake with {url} failed: {error}") from None
        except ssl_errors() as error:
            raise ConnectError(f"TLS with the daemon at {url} failed: {error} "
                               "(trust its certificate's CA with cafile=)") from None
        except OSError as error:
            raise ConnectError(f"cannot reach the cellvisor daemon at {url}: {error}") from None

    def send(self, text):
        self.ws.send(text)

    def messages(self):
        from websockets.exceptions import ConnectionClosed
        while True:
            try:
                message = self.ws.recv(timeout=self.timeout)
            except ConnectionClosed:
                return
            if isinstance(message, str):
                yield message

    def close(self):
        try:
            self.ws.close()
        except OSError:
            pass


def ssl_errors():
    import ssl
    return (ssl.SSLError, ssl.CertificateError)


class Client:
    """One connection: to the Unix socket at `path`, or to the WebSocket at `url`
    (`ws://HOST:PORT` or `wss://HOST:PORT`, path `/v1/rpc` unless given) with the bearer
    `token` (or the one in `token_file`), trusting the PEM certificates in `cafile` for
    wss (else the system's), bound to `session` when given (the daemon then refuses any
    other). Requests are answered by their (integer) id; in between come the `eval/event`
    notifications of running cells and the daemon's own `tool/call` requests (string ids),
    which `tools` answers. `timeout` (seconds, None: wait for ever) bounds every read and
    write: past it, `TimeoutError`, and the connection is done for."""

    def __init__(self, path=None, timeout=None, *, url=None, token=None, token_file=None, cafile=None,
                 session=None):
        if (path is None) == (url is None):
            raise ValueError("give the daemon's socket path or its url, one of them")
        if url is None:
            self.transport = _Unix(path, timeout)
        else:
            source = "token="
            if token is None and token_file is not None:
                source = f"token_file {token_file}"
                try:
                    with open(token_file) as f:
                        token = f.read().strip()
                except OSError as error:
                    raise ConnectError(f"cannot read the token file {token_file}: {error}") from None
                if not token:
                    raise ConnectError(f"the token file {token_file} is empty")
            self.transport = _WebSocket(url, token, source, cafile, session, timeout)
        self.next_id = 1

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.close()

    def send(self, method, params=None):
        """Writes a request without waiting for its answer (see `wait`); returns its id."""
        request_id = self.next_id
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}
        self.transport.send(json.dumps(message))
        return request_id

    def wait(self, request_id, on_event=None, tools=None):
        """Reads until the answer to `request_id` and returns its result (raises `RpcError`
        for an error). `on_event` gets the params of each `eval/event` read meanwhile;
        `tools` (name -> function of the arguments) answers each `tool/call`. The answer to
        another request sent on this connection is passed over (wait for each in order)."""
        for line in self.transport.messages():
            message = json.loads(line)
            if message.get("id") == request_id:
                if "error" in message:
                    raise RpcError(message["error"]["code"], message["error"]["message"])
                return message["result"]
            if message.get("method") == "tool/call":  # the daemon's one request to a host
                self.answer_tool_call(message, tools or {})
            elif on_event is not None and message.get("method") == "eval/event":
                on_event(message["params"])
        raise ConnectionError("the daemon closed the connection")

    def call(self, method, params=None, on_event=None, tools=None):
        """A request and its result: `send` then `wait`."""
        return self.wait(self.send(method, params), on_event, tools)

    def send_cell(self, session, language, code):
        """Starts one cell in `session` without waiting; returns the request id."""
        return self.send("eval", {"session": session, "cells": [{"language": language, "code": code}]})

    def cell(self, session, language, code, on_event=None):
        """Runs one cell in `session` and returns its result (status, output, ...)."""
        return self.wait(self.send_cell(session, language, code), on_event)["cells"][0]

    def answer_tool_call(self, request, tools):
        params = request.get("params") or {}
        function = tools.get(params.get("name"))
        try:
            if function is None:
                raise LookupError(f"this host has no tool {params.get('name')!r}")
            response = {"jsonrpc": "2.0", "id": request["id"], "result": function(params.get("arguments"))}
        except Exception as error:  # the tool's failure is the cell's to handle
            response = {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32000, "message": str(error)}}
        self.transport.send(json.dumps(response))

    def close(self):
        self.transport.close()


def connect(path, process=None, within=20.0, timeout=None):
    """A `Client` of the daemon that is starting at `path`: retries every 2 ms until it
    answers, for at most `within` seconds or until `process` (its Popen) has exited."""
    deadline = time.monotonic() + within
    while True:
        try:
            return Client(path, timeout)
        except (FileNotFoundError, ConnectionRefusedError):
            if (process is not None and process.poll() is not None) or time.monotonic() > deadline:
                raise RuntimeError(f"no daemon answers at {path}") from None
            time.sleep(0.002)


class Daemon:
    """`cellvisor serve` run from `binary` with the config `config_text`, in a private
    temporary directory (`dir`: its config, its log `daemon.log` and its runtime directory
    `run_dir`, which every process it starts inherits as XDG_RUNTIME_DIR), so that it never
    meets the user's daemon. `private_dirs` gives it its own XDG_STATE_HOME and XDG_CONFIG_HOME
    too (none of the user's session stores or startup scripts); `env`
    adds variables (None removes one); `new_session` starts it in a process group of its
    own. `client` is its first connection (initialized); `stop()` ends it by pid."""

    def __init__(self, binary, config_text="", prefix="cellvisor-daemon-", private_dirs=False,
                 env=None, new_session=False):
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.run_dir = os.path.join(self.dir, "run")
        os.mkdir(self.run_dir, 0o700)
        self.socket = os.path.join(self.run_dir, "daemon.sock")
        config = os.path.join(self.dir, "config.toml")
        with open(config, "w") as f:
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
        self.log = open(os.path.join(self.dir, "daemon.log"), "wb")
        self.process = subprocess.Popen(
            [os.path.abspath(binary), "--config", config, "serve", "--socket", self.socket],
            cwd=self.dir, env=environment, stdin=subprocess.DEVNULL, stdout=self.log,
            stderr=subprocess.STDOUT, start_new_session=new_session)
        try:
            self.client = connect(self.socket, self.process, within=30)
            self.client.call("initialize")
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self):
        return self.process.pid

    def connect(self, timeout=None):
        """Another connection to this daemon."""
        return Client(self.socket, timeout)

    def stop(self, timeout=20):
        """Asks the daemon to shut down and waits for it, kills it if it will not, and removes
        its directory; answers whether it stopped by itself."""
        clean = True
        if self.process.poll() is None:
            try:
                with self.connect(timeout) as client:
                    client.call("shutdown")
            except (OSError, RuntimeError):
                pass  # gone already, or going: the wait below tells
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                clean = False
                self.process.kill()
                self.process.wait()
        self.remove()
        return clean

    def remove(self):
        """Closes the connection and the log and removes the directory (again: no-op)."""
        client = getattr(self, "client", None)
        if client is not None:
            client.close()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def print_event(event):
    """Prints one `eval/event` as the CLI would: a header per cell, its output, its status."""
    kind = event["event"]
    if kind == "cell_started":
        title = event.get("title") or event["language"]
        print(f"--- [{event['index'] + 1}] {title}", flush=True)
    elif kind == "output":
        stream = sys.stdout if event["stream"] == "stdout" else sys.stderr
        stream.write(event["text"])
        stream.flush()
    elif kind == "display":
        print(json.dumps(event["bundle"], indent=2), flush=True)
    elif kind == "cell_done":
        print(f"--- {event['status']}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--socket", default=default_socket())
    parser.add_argument("--url", help="a daemon on the network: wss://HOST:PORT or ws://HOST:PORT")
    parser.add_argument("--token-file", help="the file holding that daemon's token")
    parser.add_argument("--cafile", help="PEM certificates to trust for wss (default: the system's)")
    parser.add_argument("--session", default="default")
    parser.add_argument("cells", nargs="*", help="pairs of LANGUAGE CODE")
    args = parser.parse_args()
    if len(args.cells) % 2:
        parser.error("cells come in pairs: LANGUAGE CODE")
    cells = [{"language": lang, "code": code} for lang, code in zip(args.cells[::2], args.cells[1::2])]

    if args.url:
        # Bound to its session, so that a router in front of several nodes places it by the
        # Cellvisor-Session header (docs/fleet.md).
        client = Client(url=args.url, token_file=args.token_file, cafile=args.cafile, session=args.session)
    else:
        client = Client(args.socket)
    with client:
        info = client.call("initialize")
        print(f"connected to cellvisor {info['server_version']} (protocol {info['protocol_version']})",
              file=sys.stderr)
        if not cells:
            print(json.dumps(client.call("status"), indent=2))
            return 0
        result = client.call("eval", {"session": args.session, "cells": cells}, on_event=print_event)
        return 1 if result["is_error"] else 0


if __name__ == "__main__":
    sys.exit(main())
