"""A daemon that accepts and never answers never hangs the client (issue 42 item 3): the
health handshake (`initialize` within `health_timeout`) gives up with `Unresponsive`, saying
what was tried and what to do; a cell may still run longer than that bound."""

import os
import signal
import socket
import threading
import time

import pytest

from cellvisor import Client, Unresponsive


def test_a_silent_listener_gives_unresponsive_within_the_bound(tmp_path):
    path = str(tmp_path / "silent.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    held = []

    def accept():
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        started = time.monotonic()
        with pytest.raises(Unresponsive) as raised:
            Client.connect(socket=path, health_timeout=1)
        assert time.monotonic() - started < 30
        message = str(raised.value)
        assert path in message and "did not answer `initialize` within 1 s" in message
        assert "CELLVISOR_HEALTH_TIMEOUT" in message
        os.environ["CELLVISOR_HEALTH_TIMEOUT"] = "1"
        try:
            with pytest.raises(Unresponsive):
                Client.connect(socket=path)
        finally:
            del os.environ["CELLVISOR_HEALTH_TIMEOUT"]
    finally:
        listener.close()
        for conn in held:
            conn.close()


def test_a_stopped_daemon_gives_unresponsive_and_a_long_cell_is_not_cut(daemon):
    if True:
        with Client.connect(socket=daemon.socket, health_timeout=2) as client:
            # Longer than the health bound: only the first answer is bounded.
            result = client.eval([{"language": "lua", "code": "local t = os.time() + 3 while os.time() < t do end print('late')"}],
                                 session="long")
            assert result["cells"][0]["output"] == "late\n"
        pid = daemon.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(Unresponsive) as raised:
                Client.connect(socket=daemon.socket, health_timeout=2)
            assert daemon.socket in str(raised.value)
        finally:
            os.kill(pid, signal.SIGCONT)
        with Client.connect(socket=daemon.socket, health_timeout=30) as client:
            assert client.eval("print('back')", language="lua", session="long")["cells"][0]["output"] == "back\n"


def test_the_async_client_gives_unresponsive_too(tmp_path):
    import asyncio

    from cellvisor import AsyncClient

    path = str(tmp_path / "silent-async.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    held = []
    threading.Thread(target=lambda: held.append(listener.accept()[0]), daemon=True).start()
    try:
        with pytest.raises(Unresponsive) as raised:
            asyncio.run(AsyncClient.connect(socket=path, health_timeout=1))
        assert "did not answer `initialize` within 1 s" in str(raised.value)
    finally:
        listener.close()
        for conn in held:
            conn.close()
