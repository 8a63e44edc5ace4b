"""cellvisor's `/mcp` driven by a real MCP client: the official Python SDK's streamable HTTP
client (`mcp.client.streamable_http`).

Usage: python tests/mcp_http_client.py URL TOKEN [--expiry SECONDS | --placement SESSIONS CALLS]

Opens two MCP sessions with `Authorization: Bearer TOKEN`. In the first: `eval` with state
kept between two calls, a background cell collected with `wait`, one stopped with `terminate`.
The second does not see the first's state and has a cellvisor session of its own; when the
first session ends (the client's DELETE), its cellvisor session is gone from `sessions` while
the second's stays. With `--expiry`, against a server whose sessions expire after SECONDS:
a long cell keeps its session, an idle one ends with its cellvisor session. With
`--placement`, against a router in front of several nodes: SESSIONS MCP sessions open at
once, each running CALLS `eval` calls that build on one variable (`x = 1`, then `x += 1`),
printing one JSON line per call: the session, the call, the value read back, and where the
cell ran (its worker's `XDG_RUNTIME_DIR`, which tells the nodes of a test fleet apart). Exits
non-zero with a clear message on the first failed check.
"""

import asyncio
import contextlib
import json
import sys
import time

from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp_checks import check, check_failures, text_of


async def open_session(stack, url, token):
    """An initialized MCP session whose transport ends (DELETE) when `stack` closes."""
    http = await stack.enter_async_context(
        create_mcp_http_client(headers={"Authorization": "Bearer " + token}))
    read, write = await stack.enter_async_context(streamable_http_client(url, http_client=http))
    session = await stack.enter_async_context(ClientSession(read, write))
    init = await session.initialize()
    check(init.server_info.name == "cellvisor", "server name: %r" % (init.server_info,))
    return session, init


async def py(session, code, **cell):
    return await session.call_tool("eval", {"cells": [dict(language="py", code=code, **cell)]})


async def own_session_name(session):
    """This MCP session's cellvisor session, as `sessions` marks it."""
    result = await session.call_tool("sessions", {})
    check(not result.is_error, "sessions answers", result)
    own = [line.split()[0] for line in text_of(result).splitlines() if "(this connection)" in line]
    check(len(own) >= 1, "sessions marks this connection's session", result)
    return own[0]


async def background_cell_id(result):
    text = text_of(result)
    check(not result.is_error and "still running in the background after " in text,
          "the cell went to the background", result)
    return int(text.split("as cell ")[1].split(":")[0])


async def main(url, token):
    async with contextlib.AsyncExitStack() as second_stack:
        second, _ = await open_session(second_stack, url, token)
        async with contextlib.AsyncExitStack() as first_stack:
            first, init = await open_session(first_stack, url, token)
            print("initialized: %s %s, protocol %s" % (
                init.server_info.name, init.server_info.version, init.protocol_version))
            tools = {tool.name for tool in (await first.list_tools()).tools}
            for name in ("eval", "wait", "terminate", "reset", "sessions"):
                check(name in tools, "tool %r missing; tools: %s" % (name, sorted(tools)))

            # eval: the state persists from one call to the next.
            result = await py(first, "x = 41")
            check(not result.is_error, "the first cell runs", result)
            result = await py(first, "print(x + 1)")
            check(not result.is_error and "42" in text_of(result),
                  "state persists between calls", result)
            print("eval: ok")

            # A cell that yields goes on in the background; `wait` collects the rest.
            result = await py(first, "import time\nprint('first', flush=True)\n"
                                     "time.sleep(1)\nprint('second')", yield_time_ms=300)
            check("first" in text_of(result) and "second" not in text_of(result),
                  "the yielded cell returns its output so far", result)
            cell_id = await background_cell_id(result)
            rest = ""
            for _ in range(10):
                result = await first.call_tool("wait", {"cell_id": cell_id, "yield_time_ms": 2000})
                check(not result.is_error, "wait answers", result)
                rest += text_of(result)
                if "still running" not in text_of(result):
                    break
            check("second" in rest and "still running" not in text_of(result),
                  "wait returns the rest and the end", result)
            print("wait: ok")

            # terminate stops a background loop; the session's state survives it.
            result = await py(first, "import time\nprint('spin', flush=True)\n"
                                     "while True:\n    time.sleep(0.05)", yield_time_ms=200)
            cell_id = await background_cell_id(result)
            result = await first.call_tool("terminate", {"cell_id": cell_id})
            check(result.is_error and "(cancelled after " in text_of(result),
                  "terminate cancels the cell", result)
            result = await py(first, "print(x)")
            check(not result.is_error and "41" in text_of(result),
                  "the state outlives the terminated cell", result)
            print("terminate: ok")

            # The second MCP session is another cellvisor session: none of the first's state.
            result = await py(second, "print('x' in globals())")
            check(not result.is_error and "False" in text_of(result),
                  "a second MCP session does not share the first's state", result)
            first_name = await own_session_name(first)
            second_name = await own_session_name(second)
            check(first_name != second_name and first_name.startswith("mcp-"),
                  "two MCP sessions, two cellvisor sessions: %r, %r" % (first_name, second_name))
            result = await second.call_tool("sessions", {})
            check(first_name in text_of(result), "both sessions are live", result)
            print("two sessions: ok (%s, %s)" % (first_name, second_name))

            # The session works in a workspace of its own; its files are resources, and a
            # `cwd` outside it is refused with the rule named.
            result = await py(first, "import os\nos.makedirs('out', exist_ok=True)\n"
                                     "open('out/report.txt', 'w').write('made by a cell')\nprint(os.getcwd())")
            check(not result.is_error and "/workspaces/local/" in text_of(result), "a workspace", result)
            listed = await first.list_resources()
            uris = [str(r.uri) for r in listed.resources]
            check("cellvisor://workspace/out/report.txt" in uris, "the file is a resource: %s" % uris)
            read = await first.read_resource("cellvisor://workspace/out/report.txt")
            check(read.contents[0].text == "made by a cell", "the resource's text", read)
            result = await first.call_tool("eval", {"cwd": "/tmp", "cells": [{"language": "py", "code": "1"}]})
            check(result.is_error and "never a path outside it" in text_of(result), "cwd outside refused", result)
            result = await first.call_tool("eval", {"cwd": "out", "cells": [{"language": "py", "code": "print(open('report.txt').read())"}]})
            check(not result.is_error and "made by a cell" in text_of(result), "cwd inside", result)
            listed = await second.list_resources()
            check(not any("report.txt" in str(r.uri) for r in listed.resources),
                  "another MCP session's workspace is not this one's", listed)
            print("workspace: ok")
        # The first session has ended (the client sent its DELETE): its cellvisor session
        # is closed, the second's is untouched.
        deadline = time.monotonic() + 10
        while True:
            result = await second.call_tool("sessions", {})
            if first_name not in text_of(result) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        check(first_name not in text_of(result),
              "the ended MCP session's cellvisor session is closed", result)
        check(second_name in text_of(result), "the other session stays", result)
        result = await py(second, "print('still here')")
        check(not result.is_error and "still here" in text_of(result),
              "the other session still runs cells", result)
        print("session end: ok")
    print("all MCP HTTP checks passed")


async def expiry(url, token, seconds):
    """Against a server whose sessions expire after `seconds` idle: a cell running longer
    than that keeps its session; a session left idle longer ends, and its calls fail."""
    async with contextlib.AsyncExitStack() as stack:
        session, _ = await open_session(stack, url, token)
        result = await py(session, "import time\ntime.sleep(%r)\nprint('slept')" % (2 * seconds))
        check(not result.is_error and "slept" in text_of(result),
              "a session running a cell does not expire", result)
        name = await own_session_name(session)
        print("busy: ok (%s)" % name, flush=True)
        await asyncio.sleep(4 * seconds)
        try:
            result = await py(session, "print('too late')")
        except Exception as error:  # noqa: BLE001 - the SDK's error for an ended session
            print("expired: ok (%s: %s)" % (type(error).__name__, error))
        else:
            check(False, "a call on an expired session fails", result)
        async with contextlib.AsyncExitStack() as later_stack:
            later, _ = await open_session(later_stack, url, token)
            result = await later.call_tool("sessions", {})
            check(name not in text_of(result),
                  "the expired MCP session's cellvisor session is closed", result)
    print("all MCP HTTP expiry checks passed")


async def placement(url, token, sessions, calls):
    """SESSIONS MCP sessions open together, CALLS rounds of one `eval` each (a round's calls
    run concurrently); every call reads back its session's counter and says where it ran."""
    marker = "@where"
    async with contextlib.AsyncExitStack() as stack:
        opened = []
        for index in range(sessions):
            session, _ = await open_session(stack, url, token)
            opened.append((index, session))
        names = {}

        async def one(index, session, call):
            code = "x = 1" if call == 0 else "x += 1"
            code += "\nimport os\nprint(%r, x, os.environ.get('XDG_RUNTIME_DIR'))" % marker
            result = await py(session, code)
            text = text_of(result)
            lines = [l.split() for l in text.splitlines() if l.startswith(marker + " ")]
            check(not result.is_error and len(lines) == 1 and len(lines[0]) == 3,
                  "call %d of session %d (%s) answers" % (call, index, names.get(index)),
                  result)
            if call == 0:
                # Named by `sessions` once its first cell started a worker.
                names[index] = await own_session_name(session)
            name = names[index]
            value = int(lines[0][1])
            check(value == call + 1, "session %d (%s) kept its state: x = %d after call %d"
                  % (index, name, value, call), result)
            return {"session": index, "name": name, "call": call, "value": value,
                    "where": lines[0][2], "restored": "state restored" in text}

        for call in range(calls):
            rows = await asyncio.gather(*(one(i, s, call) for i, s in opened))
            for row in rows:
                print(json.dumps(row), flush=True)
    # Every session ended (the client's DELETE, through the router too).
    print("all MCP placement checks passed", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[3] == "--expiry":
        run = expiry(sys.argv[1], sys.argv[2], float(sys.argv[4]))
    elif len(sys.argv) == 6 and sys.argv[3] == "--placement":
        # A call the router sent astray could leave the client waiting: bounded.
        run = asyncio.wait_for(
            placement(sys.argv[1], sys.argv[2], int(sys.argv[4]), int(sys.argv[5])), 300)
    elif len(sys.argv) == 3:
        run = main(sys.argv[1], sys.argv[2])
    else:
        sys.exit("usage: mcp_http_client.py URL TOKEN [--expiry SECONDS | --placement SESSIONS CALLS]")
    try:
        asyncio.run(run)
    except BaseException as error:  # noqa: BLE001 - report every failed check clearly
        failures = list(check_failures(error))
        if failures:
            sys.exit("CHECK FAILED: %s" % failures[0])
        raise
