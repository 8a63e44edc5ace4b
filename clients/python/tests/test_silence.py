"""A silent connection (docs/fleet.md, "The router knows a stopped node"): a daemon that is
stopped (SIGSTOP) accepts bytes and answers none. The WebSocket client pings a quiet
connection and gives up on one that answers nothing for `silent_after` seconds
(`ConnectionSilent`); `eval` then sends its request again with the same request_id, and
the cell runs once. A long quiet cell on a live daemon is not silence: the daemon answers
the pings while the cell runs."""

import os
import signal
import threading

import pytest

from cellvisor import Client, ConnectionSilent, Daemon

from conftest import CONFIG, TOKEN, binary, free_port


@pytest.fixture
def own_net_daemon(tmp_path):
    """A daemon of this test's own on ws://127.0.0.1:PORT (it is stopped and continued)."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    port = free_port()
    config = ('[isolation]\nlevel = "none"\n' + CONFIG +
              f'listen = ["tcp://127.0.0.1:{port}"]\ntoken-file = "{token_file}"\n')
    daemon = Daemon(binary(), config, prefix="cvsil-", private_dirs=True, new_session=True)
    try:
        yield daemon, f"ws://127.0.0.1:{port}"
    finally:
        try:
            os.kill(daemon.pid, signal.SIGCONT)
        except OSError:
            pass
        daemon.stop()


def test_a_long_quiet_cell_is_not_silence(own_net_daemon):
    _, url = own_net_daemon
    with Client(url=url, token=TOKEN, silent_after=1.0) as client:
        result = client.eval("import time\ntime.sleep(3)\nprint('slept')", language="py", session="quiet")
    assert result["cells"][0]["output"] == "slept\n", result


def test_a_stopped_daemon_is_silence_and_the_retry_runs_the_cell_once(own_net_daemon):
    daemon, url = own_net_daemon
    client = Client(url=url, token=TOKEN, silent_after=1.0)
    client.eval("ran = []", language="py", session="paused")
    os.kill(daemon.pid, signal.SIGSTOP)
    client.retries = 0
    with pytest.raises(ConnectionSilent):
        client.eval("ran.append('before')", language="py", session="paused", request_id="never-answered")

    # Sent while the daemon is stopped: the connection is silent, and the client goes on
    # connecting again (each upgrade unanswered) until the daemon answers, then sends the
    # request again with its id.
    client.retries = 10
    outcome = {}
    retried = threading.Event()
    opened = client._open

    def reopen():
        retried.set()
        return opened()

    client._open = reopen

    def run():
        try:
            outcome["result"] = client.eval("ran.append('retried')\nprint(ran.count('retried'))",
                                            language="py", session="paused", request_id="sent-while-stopped")
        except Exception as error:  # the assertion below names it
            outcome["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    assert retried.wait(60), "the client never gave up on the silent connection"
    os.kill(daemon.pid, signal.SIGCONT)
    thread.join(120)
    client.close()
    assert "error" not in outcome, outcome
    cell = outcome["result"]["cells"][0]
    assert cell["status"] == "complete", outcome
    assert cell["output"] == "1\n", outcome
    with Client(url=url, token=TOKEN) as again:
        count = again.eval("print(ran.count('retried'))", language="py", session="paused")
    assert count["cells"][0]["output"] == "1\n", "the cell ran once"
