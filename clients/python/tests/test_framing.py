"""The wire pieces without a daemon: WebSocket frames and Unix socket lines."""

import pytest

from cellvisor import ProtocolError, websocket
from cellvisor.wire import LineBuffer


def server_frame(opcode, payload, fin=True):
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | opcode])
    if n < 126:
        head += bytes([n])
    elif n < 65536:
        head += bytes([126]) + n.to_bytes(2, "big")
    else:
        head += bytes([127]) + n.to_bytes(8, "big")
    return head + payload


def test_client_frames_are_masked_and_decode_back():
    for size in (0, 5, 125, 126, 65535, 65536, 300000):
        payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
        raw = websocket.frame(websocket.TEXT, payload)
        assert raw[1] & 0x80, "a client frame must be masked"
        decoder = websocket.FrameDecoder()
        for i in range(0, len(raw), 7000):  # arrives in pieces
            decoder.feed(raw[i:i + 7000])
        assert decoder.pop() == (websocket.TEXT, payload)
        assert decoder.pop() is None


def test_fragments_are_joined_and_control_frames_pass_between():
    decoder = websocket.FrameDecoder()
    decoder.feed(server_frame(websocket.TEXT, b'{"a":', fin=False) + server_frame(websocket.PING, b"p")
                 + server_frame(0x0, b"1}"))
    assert decoder.pop() == (websocket.PING, b"p")
    assert decoder.pop() == (websocket.TEXT, b'{"a":1}')


def test_bad_frames_are_refused():
    for bad in (bytes([0xC1, 0]), server_frame(0x0, b"x"), server_frame(0x3, b"")):
        decoder = websocket.FrameDecoder()
        decoder.feed(bad)
        with pytest.raises(ProtocolError):
            decoder.pop()
    small = websocket.FrameDecoder(limit=10)
    small.feed(server_frame(websocket.TEXT, b"x" * 11))
    with pytest.raises(ProtocolError, match="over 10"):
        small.pop()


def test_urls():
    url = websocket.parse_url("wss://[::1]:7420")
    assert (url.secure, url.host, url.port, url.target, url.host_header) == (True, "::1", 7420, "/v1/rpc", "[::1]:7420")
    assert websocket.parse_url("ws://node-a/other?x=1").target == "/other?x=1"
    assert websocket.parse_url("ws://node-a").port == 80


def test_lines_wait_for_their_end():
    lines = LineBuffer()
    lines.feed(b'{"a": 1}\n{"b"')
    assert lines.pop() == b'{"a": 1}'
    assert lines.pop() is None
    lines.feed(b": 2}\n")
    assert lines.pop() == b'{"b": 2}'
