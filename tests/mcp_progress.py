"""cellvisor's MCP server holding long cells, driven by the official MCP Python SDK.

Usage: python tests/mcp_progress.py stdio PATH/TO/cellvisor
       python tests/mcp_progress.py http URL TOKEN

Over stdio it spawns `cellvisor mcp` (twice, for two sessions; the environment is passed to
the servers); over HTTP it opens two MCP sessions at URL with `Authorization: Bearer TOKEN`.
Checks, in the first session: a 10 s silent cell delivers a progress notification to the
SDK's progress callback at least every 5 s, then its result; a cell that prints streams its
lines as progress messages, at most about four a second, which together are its output (but
for the last quarter second, which only the result holds); a
cancelled call has its cell interrupted and the session keeps its state; an output past the
result's limit is a resource (`cellvisor://artifact/<id>`) that is linked from the result,
listed, and read whole, while bad ids and the second session's artifacts are refused with
the missing-resource error. Exits non-zero with a clear message on the first failed check.
"""

import asyncio
import contextlib
import os
import sys
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

# The MCP error for a missing resource.
RESOURCE_NOT_FOUND = -32002
HEARTBEAT_LABEL = "(still running after "
from mcp_checks import CheckFailed, check, check_failures, text_of


class Recorder:
    """A progress callback that keeps what arrived and when."""

    def __init__(self):
        self.start = time.monotonic()
        self.seen = []  # (seconds since start, progress, message)
        self.changed = asyncio.Event()

    async def __call__(self, progress, total, message):
        self.seen.append((time.monotonic() - self.start, progress, message))
        self.changed.set()

    def messages(self):
        return [m for _, _, m in self.seen if m is not None]

    def output(self):
        """The output so far: each output message carries the tail of the call's output (up
        to 100 KB, as the anchor's live updates do), so the last one holds it."""
        outputs = [m for m in self.messages() if not m.startswith(HEARTBEAT_LABEL)]
        return outputs[-1] if outputs else ""

    async def until(self, predicate, within):
        deadline = time.monotonic() + within
        while not predicate():
            left = deadline - time.monotonic()
            check(left > 0, "no such progress within %s s; got %r" % (within, self.seen))
            self.changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.changed.wait(), left)


async def py(session, code, progress=None, timeout=None):
    return await session.call_tool(
        "eval", {"cells": [{"language": "py", "code": code}]},
        read_timeout_seconds=timeout, progress_callback=progress)


async def silent_cell_keeps_the_call_alive(session):
    recorder = Recorder()
    result = await py(session, "import time\ntime.sleep(10)\nprint('woke')", recorder)
    ended = time.monotonic() - recorder.start
    check(not result.is_error and "woke" in text_of(result), "the silent cell's result", result)
    times = [0.0] + [t for t, _, _ in recorder.seen] + [ended]
    gaps = [b - a for a, b in zip(times, times[1:])]
    check(len(recorder.seen) >= 2 and max(gaps) <= 5.0,
          "a progress notification at least every 5 s of a 10 s silent cell: %r" % recorder.seen)
    progress = [p for _, p, _ in recorder.seen]
    check(all(a < b for a, b in zip(progress, progress[1:])),
          "progress increases monotonically: %r" % progress)
    check(all(m.startswith(HEARTBEAT_LABEL) or m == "woke\n" for m in recorder.messages())
          and recorder.output() in ("", "woke\n"),
          "a silent cell's progress is heartbeats (then its last line): %r" % recorder.messages())
    print("silent cell: %d notifications over %.1f s, longest gap %.1f s"
          % (len(recorder.seen), ended, max(gaps)))


async def printed_lines_stream_as_progress(session):
    # Lines apart in time arrive as messages while the cell runs.
    recorder = Recorder()
    code = "import time\nfor i in range(5):\n    print('line %d' % i, flush=True)\n    time.sleep(0.4)"
    result = await py(session, code, recorder)
    expected = "".join("line %d\n" % i for i in range(5))
    check(not result.is_error and expected in text_of(result), "the printing cell's result", result)
    check(recorder.output() == expected,
          "the progress messages carry the printed lines in order: %r" % recorder.messages())
    first = next(t for t, _, m in recorder.seen if m and "line 0" in m)
    check(first < recorder.seen[-1][0] and len(recorder.messages()) >= 3,
          "the lines stream as they are printed, not at the end: %r" % recorder.seen)
    # A flood is sent together: a few messages a second, and nothing lost.
    recorder = Recorder()
    code = "import time\nfor i in range(1000):\n    print('row %d' % i, flush=True)\n    time.sleep(0.001)"
    started = time.monotonic()
    result = await py(session, code, recorder)
    took = time.monotonic() - started
    flood = "".join("row %d\n" % i for i in range(1000))
    check(not result.is_error, "the flooding cell", result)
    # What came in the last quarter second is in the result, not in a message after the throttle.
    streamed = recorder.output()
    check(streamed and flood.startswith(streamed),
          "the flood's messages together are its output up to the end, nothing left out "
          "(%d messages, %d of %d bytes)" % (len(recorder.messages()), len(streamed), len(flood)))
    output_messages = [m for m in recorder.messages() if not m.startswith(HEARTBEAT_LABEL)]
    check(len(output_messages) <= took * 4 + 2,
          "at most 4 output messages a second: %d in %.2f s" % (len(output_messages), took))
    print("printing cell: streamed; flood of %d lines in %d messages over %.2f s"
          % (1000, len(output_messages), took))
    # A message keeps a 100 KB tail: 30,000 bytes printed at once arrive whole.
    recorder = Recorder()
    code = "import time\nprint('x' * 30000, flush=True)\ntime.sleep(1)\nprint('done')"
    result = await py(session, code, recorder)
    check(not result.is_error, "the wide cell", result)
    check(any(m.count("x") == 30000 for m in recorder.messages()),
          "a progress message carries the 30,000 bytes whole: %r"
          % [len(m) for m in recorder.messages()])


async def a_cancel_interrupts_the_cell_and_keeps_the_state(session):
    result = await py(session, "kept = 'still here'")
    check(not result.is_error, "setting a variable", result)
    recorder = Recorder()
    call = asyncio.ensure_future(py(
        session, "import time\nprint('started', flush=True)\ntime.sleep(120)\nprint('not interrupted')",
        recorder))
    await recorder.until(lambda: "started" in recorder.output(), 30)
    call.cancel()  # the SDK sends notifications/cancelled
    with contextlib.suppress(asyncio.CancelledError):
        await call
    # Were the cell still running, this call would queue behind it for two minutes.
    result = await py(session, "print(kept)", timeout=60)
    check(not result.is_error and "still here" in text_of(result),
          "after the cancel the session answers at once, with its state", result)
    print("cancel: the cell was interrupted; the state survived")


async def artifacts_are_resources(session, other, init):
    check(init.capabilities.resources is not None,
          "the server advertises resources: %r" % (init.capabilities,))
    code = "for i in range(5000):\n    print('entry %05d' % i)"
    result = await py(session, code)
    text = text_of(result)
    check(not result.is_error and "artifact://" in text, "a long output is cut and spilled", result)
    check(len(text) < 60_000, "the tool result stays bounded (%d chars)" % len(text))
    artifact_id = text.split("artifact://")[1].split(")")[0]
    uri = "cellvisor://artifact/" + artifact_id
    links = [b.uri for b in result.content if b.type == "resource_link"]
    check(links == [uri], "the result links the whole output: %r" % links, result)
    listed = [r.uri for r in (await session.list_resources()).resources]
    check(uri in listed, "resources/list lists %s: %r" % (uri, listed))
    read = await session.read_resource(uri)
    whole = "".join("entry %05d\n" % i for i in range(5000))
    check(len(read.contents) == 1 and getattr(read.contents[0], "text", None) == whole,
          "resources/read returns the whole output")
    check(read.contents[0].mime_type.startswith("text/plain"), "a text artifact is text/plain")
    templates = (await session.list_resource_templates()).resource_templates
    # Over HTTP the session's workspace files are resources too (docs/workspaces.md).
    check([t.uri_template for t in templates][:1] == ["cellvisor://artifact/{id}"]
          and all(t.uri_template == "cellvisor://workspace/{+path}" for t in templates[1:]),
          "the artifact URI template: %r" % templates)

    async def refused(client, bad):
        try:
            await client.read_resource(bad)
        except MCPError as error:
            check(error.code == RESOURCE_NOT_FOUND,
                  "%s: the missing-resource error, not %r" % (bad, error.error))
            return error.message
        raise CheckFailed("%s was read" % bad)

    for bad in ["cellvisor://artifact/../" + artifact_id, "cellvisor://artifact//etc/passwd",
                "cellvisor://artifact/" + artifact_id + ".txt", "cellvisor://artifact/nope",
                "file:///etc/passwd"]:
        await refused(session, bad)
    # Another session sees none of this one's artifacts, and this one none of its.
    result = await py(other, "for i in range(5000):\n    print('theirs %05d' % i)")
    theirs = text_of(result).split("artifact://")[1].split(")")[0]
    message = await refused(session, "cellvisor://artifact/" + theirs)
    check("this session" in message, "another session's artifact is not ours: %s" % message)
    mine = [r.uri for r in (await session.list_resources()).resources]
    check(not any(theirs in u for u in mine), "our list has none of theirs: %r" % mine)
    await refused(other, uri)
    print("artifacts: %s listed and read whole (%d bytes); bad and foreign ids refused"
          % (uri, len(whole)))


async def check_all(session, other, init):
    await silent_cell_keeps_the_call_alive(session)
    await printed_lines_stream_as_progress(session)
    await a_cancel_interrupts_the_cell_and_keeps_the_state(session)
    await artifacts_are_resources(session, other, init)


async def stdio_session(stack, binary):
    params = StdioServerParameters(command=binary, args=["mcp"], env=dict(os.environ))
    read, write = await stack.enter_async_context(stdio_client(params))
    session = await stack.enter_async_context(ClientSession(read, write))
    return session, await session.initialize()


async def http_session(stack, url, token):
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    http = await stack.enter_async_context(
        create_mcp_http_client(headers={"Authorization": "Bearer " + token}))
    read, write = await stack.enter_async_context(streamable_http_client(url, http_client=http))
    session = await stack.enter_async_context(ClientSession(read, write))
    return session, await session.initialize()


async def main(args):
    async with contextlib.AsyncExitStack() as stack:
        if args[:1] == ["stdio"] and len(args) == 2:
            session, init = await stdio_session(stack, args[1])
            other, _ = await stdio_session(stack, args[1])
        elif args[:1] == ["http"] and len(args) == 3:
            session, init = await http_session(stack, args[1], args[2])
            other, _ = await http_session(stack, args[1], args[2])
        else:
            sys.exit("usage: mcp_progress.py stdio PATH/TO/cellvisor | http URL TOKEN")
        await check_all(session, other, init)


if __name__ == "__main__":
    try:
        asyncio.run(main(sys.argv[1:]))
    except BaseException as error:  # the SDK's task groups wrap errors in exception groups
        failures = list(check_failures(error))
        if not failures:
            raise
        for failure in failures:
            print("FAILED: %s" % failure, file=sys.stderr)
        sys.exit(1)
    print("all MCP progress checks passed")
