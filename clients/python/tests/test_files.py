"""A session's workspace files through the package: upload, list, download, sync over a
WebSocket and async over the Unix socket, a file crossing the per-call part size."""

import asyncio

import pytest

from cellvisor import AsyncClient, Client, RpcError


def test_sync_upload_list_download_over_websocket(net_daemon):
    data = bytes(range(256)) * 40000  # 10 MB: two files/write parts, two files/read parts
    with Client.connect(url=net_daemon["ws"], token_file=net_daemon["token_file"], timeout=120) as client:
        client.upload("in/data.bin", data, session="py-files")
        seen = client.eval("import os; print(os.path.getsize('in/data.bin'))", language="py", session="py-files")
        assert seen["cells"][0]["output"] == f"{len(data)}\n"
        client.eval("open('out.txt', 'w').write('from a cell')", language="py", session="py-files")
        entries = client.list(session="py-files", recursive=True)
        assert [e["path"] for e in entries] == ["in", "in/data.bin", "out.txt"]
        assert client.download("out.txt", session="py-files") == b"from a cell"
        assert client.download("in/data.bin", session="py-files") == data
        with pytest.raises(RpcError) as refused:
            client.download("../elsewhere", session="py-files")
        assert "without `..`" in str(refused.value)
        client.close_session("py-files")
        assert client.list(session="py-files") == []


def test_async_upload_and_download_over_the_socket(daemon):
    async def main():
        async with await AsyncClient.connect(daemon.socket, timeout=60) as client:
            await client.upload("note.txt", b"async", session="py-files-async")
            got = await client.download("note.txt", session="py-files-async")
            listed = await client.list(session="py-files-async")
            await client.close_session("py-files-async", keep_workspace=True)
            kept = await client.download("note.txt", session="py-files-async")
            await client.close_session("py-files-async")
            return got, [e["path"] for e in listed], kept

    got, listed, kept = asyncio.run(main())
    assert (got, listed, kept) == (b"async", ["note.txt"], b"async")

