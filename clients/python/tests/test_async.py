"""The asyncio `AsyncClient` against the real daemon (each test runs its own event loop)."""

import asyncio

import pytest

import cellvisor
from cellvisor import AsyncClient, Tool

CODE = {"py": "x = 41\nprint(x + 1)", "js": "const x = 41; text(x + 1)", "lua": "local x = 41 print(x + 1)"}


def run(daemon, body):
    """Runs `body(client)` on a fresh connection in a fresh loop; its result."""
    async def main():
        async with await AsyncClient.connect(daemon.socket, timeout=60) as client:
            return await body(client)
    return asyncio.run(main())


@pytest.mark.parametrize("language", ["py", "js", "lua"])
def test_eval_streams_events_in_each_language(daemon, language):
    async def body(client):
        events = []
        result = await client.eval(CODE[language], language=language, session=f"async-{language}",
                                   on_event=events.append)
        stream = await client.eval_stream(CODE[language], language=language, session=f"async-{language}")
        streamed = [event async for event in stream]
        return result, events, streamed, stream.result

    result, events, streamed, streamed_result = run(daemon, body)
    assert result["cells"][0]["output"] == "42\n"
    for got in (events, streamed):
        kinds = [e["event"] for e in got]
        assert kinds[0] == "cell_started" and kinds[-1] == "cell_done" and set(kinds[1:-1]) == {"output"}
        assert "".join(e["text"] for e in got if e["event"] == "output") == "42\n"
    assert streamed_result["cells"][0]["output"] == "42\n"


def test_sync_and_async_tool_callbacks_answer(daemon):
    async def mul(arguments):
        await asyncio.sleep(0.01)
        return arguments["a"] * arguments["b"]

    def fail(arguments):
        raise ValueError("no such thing")

    async def body(client):
        return await client.eval(
            "print(tool.mul(a=6, b=7))\ntry:\n    tool.fail()\nexcept Exception as e:\n    print('failed:', e)",
            language="py", session="async-tools",
            tools=[Tool("mul", mul, "Multiplies"), Tool("fail", fail)])

    result = run(daemon, body)
    assert result["cells"][0]["status"] == "complete", result
    assert result["cells"][0]["output"].startswith("42\nfailed:")
    assert "no such thing" in result["cells"][0]["output"]


def test_a_background_cell_is_collected_by_wait(daemon):
    async def body(client):
        code = "local t = os.clock()\nprint('a')\nwhile os.clock() - t < 0.5 do end\nprint('b')"
        first = await client.eval([{"language": "lua", "code": code, "yield_time_ms": 100}], session="async-bg")
        cell = first["cells"][0]
        done = await client.wait(cell["cell_id"], session="async-bg")
        return cell, done

    cell, done = run(daemon, body)
    assert cell["status"] == "running" and cell["output"] == "a\n"
    assert done["status"] == "complete" and done["output"] == "b\n"


def test_interrupt_on_the_same_connection_stops_a_loop_and_state_survives(daemon):
    async def body(client):
        await client.eval("kept = 41", language="py", session="async-loop")
        loop = asyncio.ensure_future(client.eval("while True: pass", language="py", session="async-loop"))
        for _ in range(600):
            rows = await client.status()
            if any(r["session"] == "async-loop" and r["state"] == "busy" for r in rows):
                break
            await asyncio.sleep(0.05)
        interrupted = await client.interrupt("async-loop")
        stopped = await asyncio.wait_for(loop, 30)
        after = await client.cell("async-loop", "py", "print(kept + 1)")
        return interrupted, stopped, after

    interrupted, stopped, after = run(daemon, body)
    assert interrupted == {"sessions": 1}
    assert stopped["cells"][0]["status"] == "cancelled"
    assert after["output"] == "42\n"


def test_bad_requests_raise_typed_errors(daemon):
    async def body(client):
        errors = []
        for call in (client.call("eval", {"session": "s"}), client.call("no/such/method"),
                     client.eval("1", language="js", session="bad name!")):
            try:
                await call
            except cellvisor.RpcError as error:
                errors.append(error)
        return errors, await client.cell("async-after", "js", "text(2)")

    errors, after = run(daemon, body)
    assert [type(e) for e in errors] == [cellvisor.InvalidParams, cellvisor.MethodNotFound, cellvisor.Refused]
    assert [e.code for e in errors] == [-32602, -32601, -32001]
    assert after["output"] == "2\n"


def test_a_response_timeout_leaves_the_request_to_collect(daemon):
    async def body(client):
        request = await client.send("eval", {"session": "async-slow", "cells": [
            {"language": "py", "code": "import time; time.sleep(1); print('late')"}]})
        try:
            await client.result(request, response_timeout=0.2)
        except cellvisor.ResponseTimeout as error:
            timed_out = error
        return timed_out, await client.result(request)

    timed_out, late = run(daemon, body)
    assert timed_out.request_id is not None
    assert late["cells"][0]["output"] == "late\n"


def test_a_socket_nobody_listens_on_is_named(tmp_path):
    with pytest.raises(cellvisor.DaemonNotRunning):
        asyncio.run(AsyncClient.connect(str(tmp_path / "none.sock")))
