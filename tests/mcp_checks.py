"""What the MCP test clients (mcp_client.py, mcp_progress.py, mcp_http_client.py) share: a
check that fails with the tool result it was about, and the text of a result.

The scripts run as `python tests/<script>.py`, so this directory is on their path.
"""


class CheckFailed(Exception):
    pass


def check(condition, message, result=None):
    if not condition:
        if result is not None:
            message += "\n--- tool result ---\n" + describe(result)
        raise CheckFailed(message)


def check_failures(error):
    """The failed checks inside `error`, an exception group from the SDK's task groups
    included."""
    if isinstance(error, CheckFailed):
        yield error
    for inner in getattr(error, "exceptions", ()):
        yield from check_failures(inner)


def describe(result):
    """A tool result as lines: its error flag, then each block (text cut at 2000 characters)."""
    parts = ["isError=%r" % (result.is_error,)]
    for block in result.content:
        if block.type == "text":
            parts.append("[text] " + block.text[:2000])
        elif block.type == "image":
            parts.append("[image %s, %d base64 chars]" % (block.mime_type, len(block.data)))
        elif block.type == "resource_link":
            parts.append("[resource_link] " + block.uri)
        else:
            parts.append("[%s]" % block.type)
    return "\n".join(parts)


def text_of(result):
    return "\n".join(b.text for b in result.content if b.type == "text")
