"""The network listener's WebSocket (`/v1/rpc`), plaintext and TLS, through the package's own
RFC 6455 client, sync and async."""

import asyncio

import pytest

import cellvisor
from cellvisor import AsyncClient, Client, Tool

from conftest import TOKEN


def remote(net_daemon, scheme):
    if net_daemon[scheme] is None:
        pytest.skip("openssl is needed for the test certificate")
    return {"url": net_daemon[scheme], "token_file": net_daemon["token_file"], "cafile": net_daemon["cert"]}


@pytest.mark.parametrize("scheme", ["ws", "wss"])
def test_sync_eval_with_a_tool_and_events(net_daemon, scheme):
    events = []
    with Client.connect(**remote(net_daemon, scheme), timeout=60) as client:
        result = client.eval("print('x', flush=True)\nprint(tool.add(a=2, b=3))", language="py", session="net",
                             tools=[Tool("add", lambda a: a["a"] + a["b"])], on_event=events.append)
        big = client.cell("net", "py", "print(('y' * 99 + '\\n') * 400, end='')")  # frames of 16-bit lengths
    assert result["cells"][0]["output"] == "x\n5\n"
    assert "output" in [e["event"] for e in events]
    assert big["status"] == "complete" and big["output"] == ("y" * 99 + "\n") * 400


@pytest.mark.parametrize("scheme", ["ws", "wss"])
def test_async_eval_and_stream(net_daemon, scheme):
    async def main():
        async with await AsyncClient.connect(**remote(net_daemon, scheme), timeout=60) as client:
            stream = await client.eval_stream("text(6 * 7)", language="js", session="net-async")
            return [e["event"] async for e in stream], stream.result

    kinds, result = asyncio.run(main())
    assert kinds == ["cell_started", "output", "cell_done"]
    assert result["cells"][0]["output"] == "42\n"


def test_a_wrong_token_and_a_missing_one_are_named(net_daemon):
    with pytest.raises(cellvisor.ConnectError, match=r"refused the token from token=.*401"):
        Client.connect(url=net_daemon["ws"], token="not-the-token-at-all")
    with pytest.raises(cellvisor.ConnectError, match="requires a token"):
        Client.connect(url=net_daemon["ws"])
    with pytest.raises(cellvisor.ConnectError, match="refused the token"):
        asyncio.run(AsyncClient.connect(url=net_daemon["ws"], token="not-the-token-at-all"))
    with pytest.raises(cellvisor.ConnectError, match="scheme must be ws or wss"):
        Client.connect(url="https://127.0.0.1:1")


def test_an_untrusted_certificate_is_a_tls_error(net_daemon):
    if net_daemon["wss"] is None:
        pytest.skip("openssl is needed for the test certificate")
    with pytest.raises(cellvisor.ConnectError, match="TLS .* failed.*cafile="):
        Client.connect(url=net_daemon["wss"], token=TOKEN)


def test_a_bound_connection_refuses_another_session(net_daemon):
    with Client.connect(url=net_daemon["ws"], token=TOKEN, session="bound", timeout=60) as client:
        assert client.cell("bound", "lua", "print(1)")["output"] == "1\n"
        assert client.eval("print(2)", language="lua")["cells"][0]["output"] == "2\n"  # the bound session
        with pytest.raises(cellvisor.WrongSession) as refused:
            client.eval("print(3)", language="lua", session="other")
    assert refused.value.code == -32004
