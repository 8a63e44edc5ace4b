"""Drives a `jupyter server --gateway-url` that points at cellvisor, as JupyterLab does:
through jupyter_server's REST API and a Jupyter WebSocket client on its channels.

Usage: jupyter_server_client.py SERVER_URL SERVER_TOKEN GATEWAY_URL GATEWAY_TOKEN

Lists the kernelspecs, starts a kernel, runs cells (state persists, a trailing value is an
`execute_result`), interrupts a running one (its cell gets KeyboardInterrupt, the next runs),
restarts (state gone), makes a session through `/api/sessions` and deletes everything. Then
speaks the binary `v1.kernel.websocket.jupyter.org` framing to cellvisor's gateway itself, as
JupyterLab does when it reaches a gateway directly, with jupyter_server's own codec.
Prints `all jupyter_server checks passed` at the end; any failed check raises.
"""

import json
import sys
import time
import urllib.error
import urllib.request
import uuid

import websocket  # websocket-client, which jupyter_server itself depends on

SERVER, TOKEN = sys.argv[1].rstrip("/"), sys.argv[2]
GATEWAY, GATEWAY_TOKEN = sys.argv[3].rstrip("/"), sys.argv[4]
PATIENCE = 60.0


def rest(method, path, body=None, expect=(200,)):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(SERVER + path, data=data, method=method)
    request.add_header("Authorization", "token " + TOKEN)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=PATIENCE) as answer:
            status, text = answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read().decode()
    assert status in expect, f"{method} {path}: {status} (expected {expect}): {text}"
    return json.loads(text) if text.strip() else None


class Channels:
    """One kernel's channels through jupyter_server, in the legacy JSON framing: in gateway
    mode jupyter_server selects no subprotocol, whatever its client offers (and this client
    refuses an answer that selects none of those it offered, so it offers none)."""

    def __init__(self, kernel_id):
        url = SERVER.replace("http", "ws", 1) + f"/api/kernels/{kernel_id}/channels"
        self.ws = websocket.create_connection(
            url,
            header=["Authorization: token " + TOKEN],
            timeout=PATIENCE,
        )
        self.session = uuid.uuid4().hex

    def send(self, msg_type, content, channel="shell"):
        msg_id = uuid.uuid4().hex
        self.ws.send(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": msg_type, "session": self.session,
                       "username": "test", "date": "2026-01-01T00:00:00Z", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "content": content, "buffers": [],
            "channel": channel,
        }))
        return msg_id

    def until(self, msg_id, done):
        """The messages answering msg_id, read until `done(messages)`."""
        messages = []
        deadline = time.monotonic() + PATIENCE
        while not done(messages):
            assert time.monotonic() < deadline, f"no end for {msg_id}: {messages}"
            frame = self.ws.recv()
            if isinstance(frame, bytes):
                raise AssertionError("a binary frame in the legacy framing")
            message = json.loads(frame)
            if message.get("parent_header", {}).get("msg_id") == msg_id:
                messages.append(message)
        return messages

    def finished(self, messages):
        types = [(m["channel"], m["msg_type"]) for m in messages]
        idle = any(m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"
                   for m in messages)
        return idle and any(c == "shell" and t.endswith("_reply") for c, t in types)

    def request(self, msg_type, content):
        msg_id = self.send(msg_type, content)
        messages = self.until(msg_id, self.finished)
        reply = next(m for m in messages if m["channel"] == "shell")
        return reply, messages

    def execute(self, code):
        return self.request("execute_request", {
            "code": code, "silent": False, "store_history": True, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": True})

    def close(self):
        self.ws.close()


def of_type(messages, msg_type):
    return [m for m in messages if m["msg_type"] == msg_type]


def stdout(messages):
    return "".join(m["content"]["text"] for m in of_type(messages, "stream")
                   if m["content"]["name"] == "stdout")


def check_v1_framing():
    """The binary subprotocol, spoken with jupyter_server's own (de)serializer."""
    from jupyter_server.services.kernels.connection.base import (
        deserialize_msg_from_ws_v1, serialize_msg_to_ws_v1)

    request = urllib.request.Request(GATEWAY + "/api/kernels", data=b'{"name": "python3"}',
                                     method="POST")
    request.add_header("Authorization", "token " + GATEWAY_TOKEN)
    with urllib.request.urlopen(request, timeout=PATIENCE) as answer:
        kernel_id = json.loads(answer.read())["id"]
    url = GATEWAY.replace("http", "ws", 1) + f"/api/kernels/{kernel_id}/channels"
    ws = websocket.create_connection(url, header=["Authorization: token " + GATEWAY_TOKEN],
                                     subprotocols=["v1.kernel.websocket.jupyter.org"],
                                     timeout=PATIENCE)
    assert ws.subprotocol == "v1.kernel.websocket.jupyter.org", ws.subprotocol
    pack = lambda part: json.dumps(part).encode()  # noqa: E731
    msg_id = uuid.uuid4().hex
    header = {"msg_id": msg_id, "msg_type": "execute_request", "session": uuid.uuid4().hex,
              "username": "test", "date": "2026-01-01T00:00:00Z", "version": "5.3"}
    ws.send_binary(serialize_msg_to_ws_v1(
        {"header": header, "parent_header": {}, "metadata": {},
         "content": {"code": "print('v1')\n6 * 7", "silent": False, "store_history": True,
                     "stop_on_error": True}}, "shell", pack))
    seen, reply, idle = [], None, False
    deadline = time.monotonic() + PATIENCE
    while reply is None or not idle:
        assert time.monotonic() < deadline, seen
        frame = ws.recv()
        assert isinstance(frame, bytes), f"a text frame under the v1 subprotocol: {frame!r}"
        channel, parts = deserialize_msg_from_ws_v1(frame)
        header, parent, _, content = (json.loads(p) for p in parts[:4])
        if parent.get("msg_id") != msg_id:
            continue
        seen.append((channel, header["msg_type"], content))
        if channel == "shell" and header["msg_type"] == "execute_reply":
            reply = content
        if header["msg_type"] == "status" and content["execution_state"] == "idle":
            idle = True
    assert reply["status"] == "ok", seen
    kinds = [(c, t) for c, t, _ in seen]
    assert ("iopub", "execute_input") in kinds, kinds
    streams = [c["text"] for _, t, c in seen if t == "stream"]
    assert streams == ["v1\n"], seen
    results = [c for _, t, c in seen if t == "execute_result"]
    assert results and results[0]["data"]["text/plain"] == "42", seen
    ws.close()
    request = urllib.request.Request(GATEWAY + f"/api/kernels/{kernel_id}", method="DELETE")
    request.add_header("Authorization", "token " + GATEWAY_TOKEN)
    with urllib.request.urlopen(request, timeout=PATIENCE) as answer:
        assert answer.status == 204, answer.status
    print("the v1 binary framing ran a cell on cellvisor's gateway")


def check_kernelspecs():
    specs = rest("GET", "/api/kernelspecs")
    names = set(specs["kernelspecs"])
    assert {"python3", "javascript", "lua"} <= names, names
    assert specs["default"] == "python3", specs["default"]
    python = specs["kernelspecs"]["python3"]
    assert python["spec"]["language"] == "python", python
    assert "cellvisor" in python["spec"]["display_name"], python
    one = rest("GET", "/api/kernelspecs/python3")
    assert one["name"] == "python3", one
    print("kernelspecs:", sorted(names))


def check_kernel():
    model = rest("POST", "/api/kernels", {"name": "python3"}, expect=(201,))
    kernel_id = model["id"]
    uuid.UUID(kernel_id)
    assert model["name"] == "python3", model
    listed = rest("GET", "/api/kernels")
    assert any(k["id"] == kernel_id for k in listed), listed
    assert rest("GET", f"/api/kernels/{kernel_id}")["id"] == kernel_id
    ch = Channels(kernel_id)

    reply, _ = ch.request("kernel_info_request", {})
    assert reply["content"]["implementation"] == "cellvisor", reply
    assert reply["content"]["language_info"]["name"] == "python", reply

    # State persists from cell to cell; a trailing value is an execute_result.
    reply, messages = ch.execute("x = 41\nprint('set', x)")
    assert reply["content"]["status"] == "ok", reply
    assert stdout(messages) == "set 41\n", messages
    assert of_type(messages, "execute_result") == [], messages
    reply, messages = ch.execute("x + 1")
    assert reply["content"]["status"] == "ok", reply
    results = of_type(messages, "execute_result")
    assert len(results) == 1, messages
    assert results[0]["content"]["data"]["text/plain"] == "42", results
    assert results[0]["content"]["execution_count"] == reply["content"]["execution_count"]
    assert stdout(messages) == "", f"the value was printed as well: {messages}"
    reply, messages = ch.execute("{'a': [1, 2]}")
    data = of_type(messages, "execute_result")[0]["content"]["data"]
    assert data["text/plain"] == "{'a': [1, 2]}", data
    assert data.get("application/json") == {"a": [1, 2]}, data
    reply, messages = ch.execute("1 / 0")
    assert reply["content"]["status"] == "error", reply
    assert reply["content"]["ename"] == "ZeroDivisionError", reply
    assert of_type(messages, "error")[0]["content"]["ename"] == "ZeroDivisionError"
    print("cells ran; state persisted; execute_result and error as ipykernel sends them")

    # Interrupt by jupyter_server's REST route while a cell sleeps.
    msg_id = ch.send("execute_request", {"code": "import time\ntime.sleep(30)", "silent": False,
                                         "store_history": True, "stop_on_error": True})
    ch.until(msg_id, lambda ms: any(m["msg_type"] == "execute_input" for m in ms))
    started = time.monotonic()
    rest("POST", f"/api/kernels/{kernel_id}/interrupt", expect=(204,))
    messages = ch.until(msg_id, ch.finished)
    assert time.monotonic() - started < 25, "the interrupt did not stop the sleep"
    reply = next(m for m in messages if m["channel"] == "shell")
    assert reply["content"]["status"] == "error", reply
    assert reply["content"]["ename"] == "KeyboardInterrupt", reply
    reply, messages = ch.execute("print(x * 2)")
    assert reply["content"]["status"] == "ok" and stdout(messages) == "82\n", messages
    print("interrupted a sleeping cell; the next one ran")

    # Restart: the namespace is gone.
    model = rest("POST", f"/api/kernels/{kernel_id}/restart", {})
    assert model["id"] == kernel_id, model
    ch.close()
    ch = Channels(kernel_id)
    reply, messages = ch.execute("x")
    assert reply["content"]["status"] == "error", reply
    assert reply["content"]["ename"] == "NameError", reply
    reply, messages = ch.execute("y = 'fresh'\ny")
    assert of_type(messages, "execute_result")[0]["content"]["data"]["text/plain"] == "'fresh'"
    ch.close()
    print("restarted: the state is gone, the kernel runs")

    rest("DELETE", f"/api/kernels/{kernel_id}", expect=(204,))
    rest("GET", f"/api/kernels/{kernel_id}", expect=(404,))
    assert all(k["id"] != kernel_id for k in rest("GET", "/api/kernels"))
    print("deleted")


def check_sessions():
    """A notebook's session, as JupyterLab opens one: jupyter_server's sessions over the
    gateway's kernels."""
    session = rest("POST", "/api/sessions", {
        "path": "notebook.ipynb", "name": "notebook.ipynb", "type": "notebook",
        "kernel": {"name": "javascript"}}, expect=(201,))
    kernel_id = session["kernel"]["id"]
    assert session["kernel"]["name"] == "javascript", session
    ch = Channels(kernel_id)
    reply, messages = ch.execute("let n = 6 * 7; n")
    assert reply["content"]["status"] == "ok", reply
    assert of_type(messages, "execute_result")[0]["content"]["data"]["text/plain"] == "42"
    ch.close()
    rest("DELETE", f"/api/sessions/{session['id']}", expect=(204,))
    rest("GET", f"/api/kernels/{kernel_id}", expect=(404,))
    print("a notebook session ran on a JavaScript kernel and was deleted")


check_kernelspecs()
check_kernel()
check_sessions()
check_v1_framing()
print("all jupyter_server checks passed")
