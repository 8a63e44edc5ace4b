"""Requests that run once (docs/protocol.md, `request_id`): every `eval` carries a fresh id
unless the caller gives one; when the connection is lost after the request went out, the
client connects again and sends it with the same id, and the daemon answers with the first
run's result instead of running the cells again (a cell that appends to a file leaves one
line). Tested through a proxy in front of the real daemon that cuts the first connection
right after it forwarded the `eval`."""

import asyncio
import json
import os
import socket
import threading

import pytest

from cellvisor import AsyncClient, Client, ConnectionClosed


class CuttingProxy:
    """A Unix-socket proxy to the daemon that closes the first `cuts` connections (both
    ways) once it has forwarded an `eval` on them and the daemon has sent something back
    for it (its `cell_started`, or a remembered answer), which the client never hears: the
    request is under way, or answered, when the connection is lost. Later connections pass
    untouched. It records the params of every `eval` it saw."""

    def __init__(self, upstream: str, path: str, cuts: int = 1) -> None:
        self.upstream, self.path, self.cuts = upstream, path, cuts
        self.evals = []
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(8)
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            cut = self.connections < self.cuts
            self.connections += 1
            daemon = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            daemon.connect(self.upstream)
            sent, started = threading.Event(), threading.Event()
            threading.Thread(target=self._down, args=(daemon, client, cut, sent, started), daemon=True).start()
            threading.Thread(target=self._up, args=(client, daemon, cut, sent, started), daemon=True).start()

    def _up(self, client: socket.socket, daemon: socket.socket, cut: bool, sent: threading.Event,
            started: threading.Event) -> None:
        buffered = b""
        try:
            while True:
                chunk = client.recv(65536)
                if not chunk:
                    break
                buffered += chunk
                while b"\n" in buffered:
                    line, buffered = buffered.split(b"\n", 1)
                    message = json.loads(line)
                    is_eval = message.get("method") == "eval"
                    if is_eval:
                        self.evals.append(message["params"])
                        sent.set()  # before it goes: no answer to it can slip through
                    daemon.sendall(line + b"\n")
                    if is_eval:
                        if cut:
                            started.wait(30)
                            raise ConnectionAbortedError("cut")
        except OSError:
            pass
        for end in (client, daemon):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            end.close()

    @staticmethod
    def _down(daemon: socket.socket, client: socket.socket, cut: bool, sent: threading.Event,
              started: threading.Event) -> None:
        try:
            while True:
                chunk = daemon.recv(65536)
                if not chunk:
                    break
                if cut and sent.is_set():
                    started.set()
                if cut and started.is_set():
                    continue  # from then on the client hears nothing: the answer is lost
                client.sendall(chunk)
        except OSError:
            pass

    def close(self) -> None:
        self.listener.close()


def appending(path: str) -> str:
    return (f"import time\ntime.sleep(0.3)\nwith open({path!r}, 'a') as f:\n    f.write('ran\\n')\n"
            f"print(len(open({path!r}).readlines()))")


def test_a_lost_connection_is_retried_with_the_same_id_and_the_cell_runs_once(daemon, tmp_path):
    proxy = CuttingProxy(daemon.socket, str(tmp_path / "proxy.sock"))
    target = str(tmp_path / "appended.txt")
    try:
        with Client.connect(socket=proxy.path, timeout=60) as client:
            result = client.eval(appending(target), language="py", session="once-sync")
        assert result["cells"][0]["status"] == "complete", result
        assert result["cells"][0]["output"] == "1\n"
        assert result.get("replayed") is True, result
        assert len(proxy.evals) == 2
        first, retry = proxy.evals
        assert first["request_id"] == retry["request_id"] and len(first["request_id"]) == 32
        with open(target) as f:
            assert f.read() == "ran\n", "the cell ran once"
        # A request of the caller's own id keeps it; a new request gets a new one.
        with Client.connect(socket=proxy.path, timeout=60) as client:
            mine = client.eval("print('mine')", language="py", session="once-sync", request_id="caller-1")
            again = client.eval("print('mine')", language="py", session="once-sync", request_id="caller-1")
            other = client.eval("print('other')", language="py", session="once-sync")
        assert mine["cells"][0]["output"] == "mine\n" and again.get("replayed") is True
        assert other.get("replayed") is None
        assert proxy.evals[2]["request_id"] == "caller-1"
        assert proxy.evals[4]["request_id"] not in (first["request_id"], "caller-1")
    finally:
        proxy.close()


def test_retries_are_bounded(daemon, tmp_path):
    proxy = CuttingProxy(daemon.socket, str(tmp_path / "proxy.sock"), cuts=100)
    try:
        client = Client.connect(socket=proxy.path, timeout=60)
        client.retries = 2
        with pytest.raises(ConnectionClosed):
            client.eval("x = 1", language="py", session="once-bounded")
        client.close()
        assert len(proxy.evals) == 3, "the first send and two retries"
        assert len({p["request_id"] for p in proxy.evals}) == 1
    finally:
        proxy.close()


def test_the_async_client_retries_with_the_same_id_too(daemon, tmp_path):
    proxy = CuttingProxy(daemon.socket, str(tmp_path / "proxy.sock"))
    target = str(tmp_path / "appended-async.txt")

    async def main():
        async with await AsyncClient.connect(socket=proxy.path, timeout=60) as client:
            return await client.eval(appending(target), language="py", session="once-async")

    try:
        result = asyncio.run(main())
        assert result["cells"][0]["output"] == "1\n", result
        assert result.get("replayed") is True
        assert [p["request_id"] for p in proxy.evals][0] == proxy.evals[1]["request_id"]
        with open(target) as f:
            assert f.read() == "ran\n"
    finally:
        proxy.close()
        if os.path.exists(proxy.path):
            os.unlink(proxy.path)
