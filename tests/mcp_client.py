"""`cellvisor mcp` driven by a real MCP client: the official Python SDK (`mcp` on PyPI).

Usage: python tests/mcp_client.py PATH/TO/cellvisor

Spawns `cellvisor mcp` over stdio, exercises the eval/wait/terminate/reset/sessions tools and exits
non-zero with a clear message on the first failed check. The environment is passed to the
server (XDG_RUNTIME_DIR, CELLVISOR_CONFIG, ... of the calling test).
"""

import asyncio
import base64
import os
import struct
import sys
import zlib

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_checks import check, check_failures, text_of


def tiny_png():
    """A valid 1x1 red PNG, built by hand (no Pillow needed)."""

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


async def eval_cells(session, cells):
    return await session.call_tool("eval", {"cells": cells})


async def main(binary):
    params = StdioServerParameters(command=binary, args=["mcp"], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            check(init.server_info.name == "cellvisor", "server name: %r" % (init.server_info,))
            print("initialized: %s %s, protocol %s" % (
                init.server_info.name, init.server_info.version, init.protocol_version))

            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            for name in ("eval", "wait", "terminate", "reset", "sessions",
                         "checkpoint", "restore", "checkpoints", "names"):
                check(name in tools, "tool %r missing; tools: %s" % (name, sorted(tools)))
                check(tools[name].description, "tool %r has no description" % name)
            cells_schema = tools["eval"].input_schema["properties"]["cells"]
            check(cells_schema.get("minItems") == 1, "eval schema: cells.minItems: %r" % cells_schema)
            item = cells_schema["items"]
            check(item["properties"]["language"]["enum"] == ["py", "js", "lua"],
                  "eval schema: language enum: %r" % item)
            check(item["properties"]["timeout"]["minimum"] == 1
                  and item["properties"]["timeout"]["maximum"] == 600,
                  "eval schema: timeout range: %r" % item)
            print("tools: %s" % ", ".join(sorted(tools)))

            # State persists across cells and calls.
            result = await eval_cells(session, [
                {"language": "py", "code": "x = 41"},
                {"language": "py", "code": "x + 1", "title": "answer"},
            ])
            check(not result.is_error, "py cells failed", result)
            check("42" in text_of(result), "x + 1 should give 42", result)
            check("[2/2] answer" in text_of(result), "multi-cell header with the title", result)
            result = await eval_cells(session, [{"language": "py", "code": "print(x * 2)"}])
            check(not result.is_error and "82" in text_of(result),
                  "state persists across calls", result)
            print("py: ok")

            # A checkpoint is an undo: save, break the state, restore.
            result = await session.call_tool("checkpoint", {"name": "before", "language": "py"})
            check(not result.is_error and "before" in text_of(result), "checkpoint", result)
            await eval_cells(session, [{"language": "py", "code": "x = 'broken'"}])
            result = await session.call_tool("restore", {"name": "before"})
            check(not result.is_error and "restored" in text_of(result) and "x" in text_of(result),
                  "restore names what came back", result)
            result = await eval_cells(session, [{"language": "py", "code": "print(x + 1)"}])
            check(not result.is_error and "42" in text_of(result), "the state is as checkpointed", result)
            result = await session.call_tool("checkpoints", {})
            check("py before" in text_of(result), "checkpoints lists it", result)
            result = await session.call_tool("names", {"language": "py"})
            check("x (int)" in text_of(result), "names lists x with its type", result)
            result = await session.call_tool("restore", {"name": "never-made"})
            check(result.is_error is True and "no checkpoint" in text_of(result),
                  "an unknown checkpoint is an error naming it", result)
            print("checkpoints: ok")

            # JavaScript.
            result = await eval_cells(session, [{"language": "js", "code": "console.log(6*7)"}])
            check(not result.is_error and "42" in text_of(result), "js cell", result)
            print("js: ok")

            # Lua.
            result = await eval_cells(session, [{"language": "lua", "code": "print(6*7)"}])
            check(not result.is_error and "42" in text_of(result), "lua cell", result)
            print("lua: ok")

            # The first failure stops the call: error, then skipped.
            result = await eval_cells(session, [
                {"language": "py", "code": "1/0", "title": "boom"},
                {"language": "py", "code": "print('never')"},
            ])
            check(result.is_error is True, "a failing cell sets isError", result)
            text = text_of(result)
            check("ZeroDivisionError" in text, "the traceback is shown", result)
            check("(error after " in text, "the error status is shown", result)
            check("skipped" in text and "never" not in text, "the next cell is skipped", result)
            # The call ends naming the failed cell (issue 28, item 1).
            last = [b.text for b in result.content if b.type == "text"][-1]
            check(last == 'cell 1 of 2 ("boom") failed with an error; the cell after it was skipped',
                  "the last text block names the failed cell", result)
            print("failure: ok")

            # Bad requests are tool errors that say what is allowed.
            result = await eval_cells(session, [])
            check(result.is_error is True, "an empty cells list is an error", result)
            check("at least one" in text_of(result), "the error says why", result)
            result = await eval_cells(session, [{"language": "py", "code": "1", "timeout": 0}])
            check(result.is_error is True and "1 to 600" in text_of(result),
                  "a timeout out of range is an error naming the range", result)
            result = await eval_cells(session, [{"language": "ruby", "code": "1"}])
            check(result.is_error is True and "py" in text_of(result),
                  "an unknown language is an error naming the languages", result)
            print("validation: ok")

            # cwd: the cells run where the agent says; a missing directory is refused.
            import tempfile
            with tempfile.TemporaryDirectory() as project:
                result = await session.call_tool("eval", {"cwd": project, "cells": [
                    {"language": "py", "code": "import os\nprint(os.getcwd())"}]})
                check(not result.is_error and os.path.realpath(project) in text_of(result),
                      "eval runs in the given cwd", result)
            result = await session.call_tool("eval", {"cwd": "/no/such/dir", "cells": [
                {"language": "py", "code": "1"}]})
            check(result.is_error and "/no/such/dir" in text_of(result),
                  "a missing cwd is a clear tool error", result)
            print("cwd: ok")

            # Reset forgets the state.
            result = await session.call_tool("reset", {"language": "py"})
            check(not result.is_error, "reset py", result)
            result = await eval_cells(session, [{"language": "py", "code": "'x' in globals()"}])
            check(not result.is_error and "False" in text_of(result),
                  "x is gone after reset", result)
            result = await session.call_tool("reset", {})
            check(not result.is_error, "reset all", result)
            print("reset: ok")

            # Rich output: JSON as text, PNG as image content.
            png = tiny_png()
            code = (
                "import base64\n"
                "class Dot:\n"
                "    def _repr_png_(self):\n"
                "        return base64.b64decode(%r)\n"
                "display(Dot())\n"
                "display({'k': [1, 2]})\n"
            ) % base64.b64encode(png).decode()
            result = await eval_cells(session, [{"language": "py", "code": code}])
            check(not result.is_error, "display cell failed", result)
            images = [b for b in result.content if b.type == "image"]
            check(len(images) == 1, "one image content expected", result)
            check(images[0].mime_type == "image/png", "image mimeType", result)
            check(base64.b64decode(images[0].data) == png, "the PNG bytes round-trip", result)
            check('"k": [' in text_of(result), "application/json shown as pretty JSON", result)
            print("display: ok")

            # Placeholders, as the anchor's eval tool words them: `(no text output)` for a
            # cell with displays but no text, `(no output)` only when there is nothing at all.
            image_only = (
                "import base64\n"
                "class Dot:\n"
                "    def _repr_png_(self):\n"
                "        return base64.b64decode(%r)\n"
                "display(Dot())\n"
            ) % base64.b64encode(png).decode()
            result = await eval_cells(session, [{"language": "py", "code": image_only}])
            check(not result.is_error and text_of(result).startswith("(no text output)\n(complete in "),
                  "an image-only cell says (no text output)", result)
            check(len([b for b in result.content if b.type == "image"]) == 1,
                  "the image-only cell keeps its image", result)
            result = await eval_cells(session, [{"language": "py", "code": "quiet = 1"}])
            check(not result.is_error and text_of(result).startswith("(no output)\n(complete in "),
                  "a cell with nothing at all says (no output)", result)
            result = await eval_cells(session, [
                {"language": "js", "code": "display({k: 1})"},
                {"language": "lua", "code": "local quiet = 1"},
            ])
            texts = [b.text for b in result.content if b.type == "text"]
            # (Each cell may carry the notice of the earlier `reset` between header and text.)
            check(texts[0].startswith("[1/2] js\n") and "\n(no text output)\n{" in texts[0],
                  "a JSON-only cell among several says (no text output)", result)
            check(texts[1].startswith("[2/2] lua\n") and "\n(no output)\n(complete in " in texts[1]
                  and "no text output" not in texts[1],
                  "a quiet cell among several says (no output)", result)
            print("placeholders: ok")

            # A matplotlib plot comes back as an image (when the interpreter has matplotlib).
            if os.environ.get("CELLVISOR_TEST_PLOT"):
                result = await eval_cells(session, [{"language": "py", "code":
                    "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('t')\nplt.show()"}])
                check(not result.is_error, "plot cell failed", result)
                images = [b for b in result.content if b.type == "image"]
                check(len(images) == 1, "one plot image expected", result)
                if images:
                    data = base64.b64decode(images[0].data)
                    check(data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 2000,
                          "the plot is a real PNG", result)
                print("plot: ok")

            # Timeout: cancelled, isError.
            result = await eval_cells(session, [
                {"language": "py", "code": "import time\ntime.sleep(30)", "timeout": 1}])
            check(result.is_error is True and "(cancelled after " in text_of(result),
                  "a cell over its timeout is cancelled", result)
            check("timed out" in text_of(result), "the timeout is explained", result)
            print("timeout: ok")

            # A cell that yields comes back still running; `wait` collects the rest.
            result = await eval_cells(session, [{"language": "py", "yield_time_ms": 300, "code":
                "import time\nprint('first', flush=True)\ntime.sleep(1)\nprint('second')"}])
            text = text_of(result)
            check(not result.is_error and "first" in text and "second" not in text,
                  "the yielded cell returns its output so far", result)
            check("still running in the background after " in text,
                  "the result says the cell is still running", result)
            cell_id = int(text.split("as cell ")[1].split(":")[0])
            rest = ""
            for _ in range(10):
                result = await session.call_tool("wait", {"cell_id": cell_id, "yield_time_ms": 2000})
                check(not result.is_error, "wait answers", result)
                rest += text_of(result)
                if "still running" not in text_of(result):
                    break
            check("second" in rest and "still running" not in text_of(result),
                  "wait returns the rest and the end", result)
            result = await session.call_tool("wait", {"cell_id": cell_id})
            check(result.is_error and "no background cell" in text_of(result),
                  "a collected cell is gone", result)
            # terminate ends a background busy loop.
            result = await eval_cells(session, [{"language": "js", "code":
                "// @exec: {\"yield_time_ms\": 200}\ntext('spin'); while (true) {}"}])
            check("still running" in text_of(result), "the busy loop yields", result)
            cell_id = int(text_of(result).split("as cell ")[1].split(":")[0])
            result = await session.call_tool("terminate", {"cell_id": cell_id})
            check(result.is_error and "(cancelled after " in text_of(result),
                  "terminate cancels the cell", result)
            print("wait/terminate: ok")

            result = await session.call_tool("sessions", {})
            check(not result.is_error and "mcp-" in text_of(result) and "py" in text_of(result),
                  "sessions lists this connection's workers", result)
            print("sessions: ok\n" + text_of(result))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: mcp_client.py PATH/TO/cellvisor")
    try:
        asyncio.run(main(sys.argv[1]))
    except BaseException as error:  # the SDK's task groups wrap errors in exception groups
        failures = list(check_failures(error))
        if not failures:
            raise
        for failure in failures:
            print("FAILED: %s" % failure, file=sys.stderr)
        sys.exit(1)
    print("all MCP checks passed")
