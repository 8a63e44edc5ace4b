"""A fleet's faults as the clients see them (docs/fleet.md, "The clients' retries"), for the
sync `Client` and the `AsyncClient` alike:

- `LEASED_ELSEWHERE`: two nodes share a snapshot directory with file leases; node-a holds
  the session, and an `eval` sent to node-b is refused naming node-a. The client waits the
  refusal's `retry_after_ms` and sends the request again with its id; once node-a stopped
  (its session saved, its lease released), node-b restores the session and answers.
- a silent connection (async; the sync client's is in test_silence.py): a SIGSTOPped daemon
  on the network accepts bytes and answers none; the client pings, gives up after
  `silent_after`, connects again until the daemon is continued, and the cell runs once.

(A connection cut mid-answer is test_once.py's, for both clients.)"""

import asyncio
import os
import signal

import pytest

from cellvisor import AsyncClient, Client, ConnectionSilent, Daemon, LeasedElsewhere

from conftest import TOKEN, binary
from test_silence import own_net_daemon  # noqa: F401 (a fixture)


def node_config(node: str, key: str) -> str:
    return (f'[python]\nprewarm = 0\n[daemon]\nidle-exit = "0s"\nnode = "{node}"\n'
            f'[snapshots]\nwhen = "every-cell"\nkey-file = "{key}"\n'
            '[fleet]\nleases = true\nlease-ttl = "5s"\n')


@pytest.fixture
def fleet(tmp_path):
    """Two nodes sharing one snapshot directory and key file: (node-a, node-b)."""
    snapshots = tmp_path / "snapshots"
    key = tmp_path / "fleet.key"
    key.write_bytes(b"\x5a" * 32)
    key.chmod(0o400)
    env = {"CELLVISOR_SNAPSHOTS__DIR": str(snapshots)}
    nodes = []
    try:
        for node in ("node-a", "node-b"):
            nodes.append(Daemon(binary(), node_config(node, str(key)), prefix=f"cvfleet-{node}-",
                                private_dirs=True, env=env, new_session=True))
        yield nodes[0], nodes[1]
    finally:
        for started in nodes:
            started.stop()


def held_by_a(a: Daemon, b: Daemon, session: str) -> None:
    """The session lives on node-a, and node-b refuses it naming node-a."""
    with Client.connect(socket=a.socket, timeout=60) as on_a:
        first = on_a.eval("x = 41", language="py", session=session)
    assert first["node"] == "node-a", first
    with Client.connect(socket=b.socket, timeout=60) as on_b:
        on_b.retries = 0
        with pytest.raises(LeasedElsewhere) as refused:
            on_b.eval("x + 1", language="py", session=session)
    assert refused.value.data["node"] == "node-a", refused.value.data
    assert 0 < refused.value.data["retry_after_ms"] <= 5000, refused.value.data


def moved(result, reopened) -> None:
    """The retried request ran once, on node-b, from node-a's state."""
    assert reopened, "the client never sent the request again"
    cell = result["cells"][0]
    assert cell["status"] == "complete", result
    assert cell["output"].strip() == "42", result
    assert result["node"] == "node-b", result
    assert cell["state"]["from"]["node"] == "node-a", result


def test_the_sync_client_retries_a_leased_elsewhere_refusal(fleet):
    a, b = fleet
    held_by_a(a, b, "moving-sync")
    client = Client.connect(socket=b.socket)
    client.retries = 10
    opened, reopened = client._open, []

    def reopen():
        # The refusal came; node-a stops now (its lease released), so the next try moves.
        if not reopened:
            a.stop()
        reopened.append(1)
        return opened()

    client._open = reopen
    try:
        result = client.eval("x + 1", language="py", session="moving-sync")
    finally:
        client.close()
    moved(result, reopened)


def test_the_async_client_retries_a_leased_elsewhere_refusal(fleet):
    a, b = fleet
    held_by_a(a, b, "moving-async")

    async def main():
        async with await AsyncClient.connect(socket=b.socket) as client:
            client.retries = 10
            opened, reopened = client._open, []

            async def reopen():
                if not reopened:
                    await asyncio.get_running_loop().run_in_executor(None, a.stop)
                reopened.append(1)
                return await opened()

            client._open = reopen
            return await asyncio.wait_for(client.eval("x + 1", language="py", session="moving-async"), 120), reopened

    result, reopened = asyncio.run(main())
    moved(result, reopened)


def test_the_async_client_gives_up_a_silent_connection_and_the_retry_runs_the_cell_once(own_net_daemon):  # noqa: F811
    daemon, url = own_net_daemon

    async def main():
        client = await AsyncClient.connect(url=url, token=TOKEN, silent_after=1.0)
        try:
            # A quiet cell on a live daemon is not silence: it answers the pings.
            quiet = await client.eval("import time\ntime.sleep(3)\nran = []\nprint('slept')", language="py",
                                      session="paused-async")
            assert quiet["cells"][0]["output"] == "slept\n", quiet
            os.kill(daemon.pid, signal.SIGSTOP)
            client.retries = 0
            with pytest.raises(ConnectionSilent):
                await asyncio.wait_for(client.eval("ran.append('before')", language="py", session="paused-async",
                                                   request_id="never-answered-async"), 60)

            # Sent while the daemon is stopped: the client goes on connecting again (each
            # upgrade unanswered) until the daemon answers, then sends the request with its id.
            client.retries = 10
            retried = asyncio.Event()
            opened = client._open

            async def reopen():
                retried.set()
                return await opened()

            client._open = reopen
            task = asyncio.ensure_future(client.eval("ran.append('retried')\nprint(ran.count('retried'))",
                                                     language="py", session="paused-async",
                                                     request_id="sent-while-stopped-async"))
            await asyncio.wait_for(retried.wait(), 60)
            os.kill(daemon.pid, signal.SIGCONT)
            return await asyncio.wait_for(task, 120)
        finally:
            os.kill(daemon.pid, signal.SIGCONT)
            await client.close()

    result = asyncio.run(main())
    cell = result["cells"][0]
    assert cell["status"] == "complete", result
    assert cell["output"] == "1\n", result
    with Client(url=url, token=TOKEN) as again:
        count = again.eval("print(ran.count('retried'))", language="py", session="paused-async")
    assert count["cells"][0]["output"] == "1\n", "the cell ran once"
