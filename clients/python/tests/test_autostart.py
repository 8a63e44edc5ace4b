"""`connect(autostart=True)` starts `cellvisor serve` as the CLI does, on a socket nobody
listens on; each test shuts the daemon it started down and waits for that pid to exit."""

import asyncio
import os
import shutil
import tempfile

import pytest

import cellvisor
from cellvisor import AsyncClient, Client

from conftest import CONFIG, binary


@pytest.fixture
def private(monkeypatch):
    """A socket in a private directory, a config file, and the daemon's state kept there (a
    short path: the workers' sockets go under XDG_RUNTIME_DIR, and a socket path is short)."""
    base = tempfile.mkdtemp(prefix="cv-auto-")
    for name in ("XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR"):
        os.mkdir(os.path.join(base, name[4]), 0o700)
        monkeypatch.setenv(name, os.path.join(base, name[4]))
    monkeypatch.setenv("CELLVISOR_SNAPSHOTS__DIR", os.path.join(base, "snapshots"))
    monkeypatch.delenv("CELLVISOR_SOCKET", raising=False)
    config = os.path.join(base, "config.toml")
    with open(config, "w") as f:
        f.write(CONFIG)
    yield {"socket": os.path.join(base, "run", "daemon.sock"), "config": config}
    shutil.rmtree(base, ignore_errors=True)


def stopped(started, client_shutdown):
    """Asks the daemon to shut down and waits for its process (the one we started) to end."""
    try:
        client_shutdown()
    finally:
        try:
            started.process.wait(30)
        except Exception:
            started.process.kill()
            raise
    return started.process.returncode


def test_sync_autostart_starts_a_daemon_then_reuses_it(private):
    with pytest.raises(cellvisor.DaemonNotRunning):
        Client.connect(private["socket"])
    client = Client.connect(private["socket"], autostart=True, program=binary(), config=private["config"], timeout=60)
    try:
        assert client.started is not None
        assert client.initialize()["pid"] == client.started.pid
        assert client.cell("auto", "py", "print(6 * 7)")["output"] == "42\n"
        assert os.path.exists(client.started.log)
        with Client.connect(private["socket"], autostart=True, program=binary(), timeout=60) as again:
            assert again.started is None  # one was listening: nothing started
            assert again.cell("auto", "py", "print('again')")["output"] == "again\n"
        code = stopped(client.started, client.shutdown)
    finally:
        client.close()
    assert code == 0
    with pytest.raises(cellvisor.DaemonNotRunning):
        Client.connect(private["socket"])


def test_async_autostart(private):
    async def main():
        client = await AsyncClient.connect(private["socket"], autostart=True, program=binary(),
                                           config=private["config"], timeout=60)
        try:
            output = (await client.cell("auto", "lua", "print(6 * 7)"))["output"]
            started = client.started
            await client.shutdown()
        finally:
            await client.close()
        return output, started

    output, started = asyncio.run(main())
    assert output == "42\n"
    assert started is not None
    assert started.process.wait(30) == 0


def test_autostart_with_a_missing_program_says_so(private):
    with pytest.raises(cellvisor.StartError, match="cannot run"):
        Client.connect(private["socket"], autostart=True, program=os.path.join(private["config"] + ".missing"))
