"""The sync `Client` against the real daemon."""

import threading
import time

import pytest

import cellvisor
from cellvisor import Client, Tool

CODE = {"py": "x = 41\nprint(x + 1)", "js": "const x = 41; text(x + 1)", "lua": "local x = 41 print(x + 1)"}


@pytest.fixture
def client(daemon):
    with Client.connect(daemon.socket, timeout=60) as connected:
        yield connected


@pytest.mark.parametrize("language", ["py", "js", "lua"])
def test_eval_streams_events_in_each_language(client, language):
    events = []
    result = client.eval(CODE[language], language=language, session=f"sync-{language}", on_event=events.append)
    assert result["is_error"] is False
    assert result["cells"][0]["output"] == "42\n"
    kinds = [e["event"] for e in events]
    assert kinds[0] == "cell_started" and kinds[-1] == "cell_done" and set(kinds[1:-1]) == {"output"}
    assert "".join(e["text"] for e in events if e["event"] == "output") == "42\n"
    assert {e["stream"] for e in events if e["event"] == "output"} == {"stdout"}
    assert all(e["request_id"] == events[0]["request_id"] for e in events)


def test_state_persists_and_a_failing_cell_stops_the_request(client):
    result = client.eval([{"language": "py", "code": "y = 2"}, {"language": "py", "code": "1/0", "title": "boom"},
                          {"language": "py", "code": "print('never')"}], session="sync-state")
    assert result["is_error"] is True
    assert [c["status"] for c in result["cells"]] == ["complete", "error", "skipped"]
    assert "ZeroDivisionError" in result["cells"][1]["output"]
    assert client.cell("sync-state", "py", "print(y * 21)")["output"] == "42\n"


def test_eval_stream_iterates_events_then_holds_the_result(client):
    stream = client.eval_stream("for i = 1, 3 do print(i) end", language="lua", session="sync-stream")
    with pytest.raises(RuntimeError, match="still running"):
        _ = stream.result
    kinds = [event["event"] for event in stream]
    assert kinds[0] == "cell_started" and kinds[-1] == "cell_done" and "output" in kinds
    assert stream.result["cells"][0]["output"] == "1\n2\n3\n"


def test_a_tool_callback_answers_and_a_failing_tool_fails_the_cell(client):
    calls = []

    def add(arguments):
        calls.append(arguments)
        return arguments["a"] + arguments["b"]

    def divide(arguments):
        raise ZeroDivisionError("cannot divide by zero")

    tools = [Tool("add", add, "Adds two numbers", {"type": "object", "properties": {"a": {"type": "number"}}}),
             Tool("divide", divide)]
    code = ("const sum = await tool.add({a: 2, b: 3});\nlet failure;\n"
            "try { await tools.divide({a: 1, b: 0}); } catch (e) { failure = e.message; }\ntext({sum, failure})")
    result = client.eval(code, language="js", session="sync-tools", tools=tools)
    assert result["cells"][0]["status"] == "complete", result
    assert '"sum":5' in result["cells"][0]["output"].replace(" ", "")
    assert "cannot divide by zero" in result["cells"][0]["output"]
    assert calls == [{"a": 2, "b": 3}]
    py = client.eval("print(tool.mul(a=6, b=7))", language="py", session="sync-tools",
                     tools={"mul": lambda a: a["a"] * a["b"]})
    assert py["cells"][0]["output"] == "42\n"


def test_a_background_cell_is_collected_by_wait(client):
    code = "import time\nprint('a', flush=True)\ntime.sleep(1)\nprint('b')"
    first = client.eval([{"language": "py", "code": code, "yield_time_ms": 200}], session="sync-bg")
    cell = first["cells"][0]
    assert cell["status"] == "running" and cell["output"] == "a\n"
    events = []
    done = client.wait(cell["cell_id"], session="sync-bg", on_event=events.append)
    assert done["status"] == "complete" and done["output"] == "b\n"
    assert [e["text"] for e in events if e["event"] == "output"] == ["b\n"]
    with pytest.raises(cellvisor.RpcError):
        client.wait(cell["cell_id"], session="sync-bg")  # collected: the id is gone


def test_terminate_stops_a_background_cell(client):
    first = client.eval([{"language": "lua", "code": "while true do end", "yield_time_ms": 100}], session="sync-term")
    ended = client.terminate(first["cells"][0]["cell_id"], session="sync-term")
    assert ended["status"] == "cancelled"


def test_interrupt_from_another_thread_stops_a_loop_and_state_survives(client):
    client.eval("kept = 'still here'", language="py", session="sync-loop")
    outcome = {}
    runner = threading.Thread(target=lambda: outcome.update(
        result=client.eval("while True: pass", language="py", session="sync-loop")))
    runner.start()
    deadline = time.monotonic() + 30
    while not any(r["session"] == "sync-loop" and r["state"] == "busy" for r in client.status()):
        assert time.monotonic() < deadline, "the loop never ran"
        time.sleep(0.05)
    assert client.interrupt("sync-loop", "py") == {"sessions": 1}
    runner.join(30)
    assert not runner.is_alive()
    assert outcome["result"]["cells"][0]["status"] == "cancelled"
    assert client.cell("sync-loop", "py", "print(kept)")["output"] == "still here\n"


def test_bad_requests_raise_typed_errors_with_their_codes(client):
    with pytest.raises(cellvisor.InvalidParams) as missing:
        client.call("eval", {"session": "s"})
    assert missing.value.code == -32602 and "cells" in missing.value.message
    with pytest.raises(cellvisor.MethodNotFound) as unknown:
        client.call("no/such/method")
    assert unknown.value.code == -32601
    with pytest.raises(cellvisor.Refused) as refused:
        client.eval("1", language="py", session="bad name!")
    assert refused.value.code == -32001 and "session" in refused.value.message
    assert client.cell("sync-after-errors", "js", "text(1)")["output"] == "1\n"  # the connection goes on


def test_a_response_timeout_leaves_the_request_to_collect(client):
    request = client.send("eval", {"session": "sync-slow", "cells": [
        {"language": "py", "code": "import time; time.sleep(1); print('late')"}]})
    with pytest.raises(cellvisor.ResponseTimeout) as late:
        client.result(request, response_timeout=0.2)
    assert isinstance(late.value, TimeoutError) and late.value.request_id == request
    assert client.result(request, response_timeout=30)["cells"][0]["output"] == "late\n"


def test_session_methods(client):
    client.eval("z = 1", language="py", session="sync-methods")
    assert client.initialize()["protocol_version"] >= 1
    rows = [r for r in client.status() if r["session"] == "sync-methods"]
    assert rows and rows[0]["language"] == "py"
    names = client.names("py", session="sync-methods")
    assert "z" in [n["name"] for n in names["names"]]
    assert client.checkpoints("sync-methods") == []
    assert client.reset("sync-methods", "py") == {"sessions": 1}
    assert client.close_session("sync-methods") == {"sessions": 1}
    assert client.config_reload()["reloaded"] is True
    assert client.drain()["draining"] is True
    assert client.undrain()["draining"] is False


def test_a_socket_nobody_listens_on_is_named(tmp_path):
    with pytest.raises(cellvisor.DaemonNotRunning, match="autostart=True"):
        Client.connect(str(tmp_path / "none.sock"))
