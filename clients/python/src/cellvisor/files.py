"""A session's workspace files over the `files/*` methods: the parts an upload is sent in and
the decoding of a download's parts, shared by the sync and the async client
(docs/workspaces.md)."""

from __future__ import annotations

import base64
from typing import Any, Dict, Iterator, Mapping, Optional

#: The most bytes one `files/write` carries and one `files/read` returns (the daemon's bound).
CHUNK_BYTES = 8 * 1024 * 1024


def write_params(session: Optional[str], path: str, data: bytes) -> Iterator[Dict[str, Any]]:
    """The `files/write` params of an upload: the first part replaces the file, the rest
    follow it by offset (an empty file is one empty part)."""
    offset = 0
    while True:
        part = data[offset:offset + CHUNK_BYTES]
        params: Dict[str, Any] = {"path": path, "data": base64.b64encode(part).decode("ascii"),
                                  "encoding": "base64"}
        if session is not None:
            params["session"] = session
        if offset:
            params["offset"] = offset
        yield params
        offset += len(part)
        if offset >= len(data):
            return


def read_params(session: Optional[str], path: str, offset: int) -> Dict[str, Any]:
    """The `files/read` params of a download's part at `offset`."""
    params: Dict[str, Any] = {"path": path, "offset": offset, "encoding": "base64"}
    if session is not None:
        params["session"] = session
    return params


def part_bytes(result: Mapping[str, Any]) -> bytes:
    """The bytes of a `files/read` answer."""
    data = result.get("data", "")
    if result.get("encoding") == "base64":
        return base64.b64decode(data)
    return str(data).encode("utf-8")
