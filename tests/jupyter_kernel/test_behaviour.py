"""What the cellvisor kernel does beyond the conformance suite: a message signed with another
key is dropped (with a line in the kernel's log) and the kernel goes on serving, and so is a
signed message sent again, a frame claiming terabytes or garbage on any port; a kernelspec
installed with `--session` attaches to that session and sees what ran there before, and leaves
it open; a kernel of its own session ends its process and closes the session on shutdown (even
while a cell runs), on SIGTERM, and when the process that started it is killed.

Run by tests/zmq_kernel.rs: CELLVISOR_BIN is the binary, CELLVISOR_SOCKET the test daemon's,
JUPYTER_PATH holds the plain kernelspecs, CELLVISOR_ATTACHED_KERNELS the `--session` ones.
"""

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

import zmq

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from jupyter_client.session import Session

CELLVISOR = os.environ["CELLVISOR_BIN"]
ATTACHED_KERNELS = os.environ["CELLVISOR_ATTACHED_KERNELS"]
ATTACHED_SESSION = os.environ["CELLVISOR_ATTACHED_SESSION"]
TIMEOUT = 30


def sessions():
    """The live sessions' names, as `cellvisor status` lists them."""
    out = subprocess.run([CELLVISOR, "status", "--json"], capture_output=True, text=True, check=True)
    return {row["session"] for row in json.loads(out.stdout)["sessions"]}


def run(kc, code):
    """Executes `code`; the reply's content and the text of its stdout stream."""
    msg_id = kc.execute(code)
    reply = kc.get_shell_msg(timeout=TIMEOUT)
    assert reply["parent_header"]["msg_id"] == msg_id, reply
    out = ""
    while True:
        msg = kc.get_iopub_msg(timeout=TIMEOUT)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
            out += msg["content"]["text"]
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return reply["content"], out


def start(name, log, kernel_dirs=None):
    ksm = KernelSpecManager(kernel_dirs=kernel_dirs) if kernel_dirs else KernelSpecManager()
    km = KernelManager(kernel_name=name, kernel_spec_manager=ksm)
    km.start_kernel(stderr=log)
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=TIMEOUT)
    return km, kc


def wait_gone(km, within=15):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not km.is_alive():
            return True
        time.sleep(0.05)
    return False


def pid_gone(pid):
    """Whether `pid` ended (gone, or a zombie its new parent has not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def wait_pid_gone(pid, within=TIMEOUT):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if pid_gone(pid):
            return True
        time.sleep(0.05)
    return False


def wait_log(log, text, count=1, within=TIMEOUT):
    """The kernel's log once `text` is in it `count` times (or at the deadline)."""
    deadline = time.monotonic() + within
    while True:
        log.seek(0)
        seen = log.read()
        if seen.count(text) >= count or time.monotonic() > deadline:
            return seen
        time.sleep(0.05)


# A ZMTP 3.0 greeting (NULL mechanism), as any ZeroMQ peer opens a connection with.
GREETING = b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL" + b"\x00" * 16 + b"\x00" + b"\x00" * 31

# A parent for a kernel: starts it with jupyter_client (which sets JPY_PARENT_PID), runs a
# cell, says the kernel's pid, then waits to be killed.
PARENT = textwrap.dedent("""
    import sys, time
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    dirs = sys.argv[2:] or None
    ksm = KernelSpecManager(kernel_dirs=dirs) if dirs else KernelSpecManager()
    km = KernelManager(kernel_name=sys.argv[1], kernel_spec_manager=ksm)
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=30)
    kc.execute_interactive("from_the_parent = 5", timeout=30)
    print(km.provisioner.pid, flush=True)
    time.sleep(600)
""")


class KernelBehaviour(unittest.TestCase):
    def test_a_replayed_signed_message_is_dropped(self):
        with tempfile.TemporaryFile("w+") as log:
            km, kc = start("cellvisor-python", log)
            try:
                run(kc, "replays = 0")
                # A peer that captured a signed message (it has not the key) sends it again.
                msg = kc.session.msg("execute_request", content={
                    "code": "replays += 1", "silent": False, "store_history": True,
                    "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
                frames = kc.session.serialize(msg)
                ctx = zmq.Context.instance()
                peer = ctx.socket(zmq.DEALER)
                try:
                    peer.connect(f"tcp://{km.ip}:{km.shell_port}")
                    peer.send_multipart(frames)
                    self.assertTrue(peer.poll(TIMEOUT * 1000), "the first send was not answered")
                    peer.send_multipart(frames)
                    seen = wait_log(log, "replayed message")
                    self.assertEqual(seen.count("replayed message"), 1, seen)
                finally:
                    peer.close(linger=0)
                reply, out = run(kc, "print(replays)")
                self.assertEqual((reply["status"], out), ("ok", "1\n"))
            finally:
                kc.stop_channels()
                km.shutdown_kernel()

    def test_a_frame_claiming_terabytes_or_garbage_on_any_port_leaves_the_kernel_serving(self):
        with tempfile.TemporaryFile("w+") as log:
            km, kc = start("cellvisor-python", log)
            try:
                ports = [km.shell_port, km.control_port, km.stdin_port, km.iopub_port, km.hb_port]
                peers = []
                for port in ports:
                    # No key, no handshake: the greeting, then one frame header claiming 16 TiB.
                    peer = socket.create_connection((km.ip, port))
                    peer.sendall(GREETING)
                    peer.sendall(b"\x06" + struct.pack(">Q", 1 << 44))
                    peers.append(peer)
                    garbage = socket.create_connection((km.ip, port))
                    garbage.sendall(b"GET / HTTP/1.0\r\n\r\n")
                    peers.append(garbage)
                # A ZeroMQ peer past the handshake whose message is over the limit, on the
                # heartbeat: it is dropped, and the heartbeat answers the next peer.
                ctx = zmq.Context.instance()
                big = ctx.socket(zmq.REQ)
                big.connect(f"tcp://{km.ip}:{km.hb_port}")
                big.send(b"x" * (65 << 20))
                time.sleep(0.5)
                big.close(linger=0)
                ping = ctx.socket(zmq.REQ)
                try:
                    ping.connect(f"tcp://{km.ip}:{km.hb_port}")
                    ping.send(b"ping")
                    self.assertTrue(ping.poll(TIMEOUT * 1000), "the heartbeat stopped")
                    self.assertEqual(ping.recv(), b"ping")
                finally:
                    ping.close(linger=0)
                self.assertTrue(km.is_alive(), wait_log(log, "", within=0))
                reply, out = run(kc, "print('still serving')")
                self.assertEqual((reply["status"], out), ("ok", "still serving\n"))
                # jupyter_client's own heartbeat (a ping a second) beats again, if a ping of
                # its was lost while the flood went on.
                deadline = time.monotonic() + 10
                while not kc.hb_channel.is_beating() and time.monotonic() < deadline:
                    time.sleep(0.1)
                self.assertTrue(kc.hb_channel.is_beating())
                kc.control_channel.send(kc.session.msg("kernel_info_request"))
                self.assertEqual(kc.get_control_msg(timeout=TIMEOUT)["msg_type"], "kernel_info_reply")
                for peer in peers:
                    peer.close()
            finally:
                kc.stop_channels()
                km.shutdown_kernel()

    def test_a_forged_message_is_dropped_and_the_kernel_goes_on(self):
        with tempfile.TemporaryFile("w+") as log:
            km, kc = start("cellvisor-python", log)
            try:
                forger = Session(key=b"not-the-connection-key")
                forged = forger.msg("execute_request", content={
                    "code": "forged = True\nprint('forged ran')", "silent": False, "store_history": True,
                    "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
                forger.send(kc.shell_channel.socket, forged)
                forger.send(kc.control_channel.socket, forger.msg("shutdown_request", content={"restart": False}))
                reply, out = run(kc, "print('alive', 'forged' in globals())")
                self.assertEqual(reply["status"], "ok")
                self.assertEqual(out, "alive False\n")
                self.assertTrue(km.is_alive(), "a forged shutdown_request ended the kernel")
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    log.seek(0)
                    text = log.read()
                    if text.count("bad signature") >= 2:
                        break
                    time.sleep(0.05)
                self.assertEqual(text.count("bad signature"), 2, text)
            finally:
                kc.stop_channels()
                km.shutdown_kernel()

    def test_clear_output_reaches_iopub_in_order_with_its_wait(self):
        with tempfile.TemporaryFile("w+") as log:
            km, kc = start("cellvisor-python", log)
            try:
                msg_id = kc.execute("clear_output = get_ipython().display_pub.clear_output\n"
                                    "print('old')\nclear_output()\n"
                                    "for i in range(3):\n    clear_output(wait=True)\n    print(i)")
                seen = []
                while True:
                    msg = kc.get_iopub_msg(timeout=TIMEOUT)
                    if msg["parent_header"].get("msg_id") != msg_id:
                        continue
                    if msg["msg_type"] == "stream":
                        seen.append(("stream", msg["content"]["text"]))
                    elif msg["msg_type"] == "clear_output":
                        seen.append(("clear_output", msg["content"]["wait"]))
                    elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                        break
                expected = [("stream", "old\n"), ("clear_output", False)]
                for i in range(3):
                    expected += [("clear_output", True), ("stream", "%d\n" % i)]
                self.assertEqual(seen, expected)
            finally:
                kc.stop_channels()
                km.shutdown_kernel()

    def test_interrupt_request_on_control_stops_the_running_cell(self):
        with tempfile.TemporaryFile("w+") as log:
            km, kc = start("cellvisor-python", log)
            try:
                run(kc, "import time")
                msg_id = kc.execute("print('started', flush=True)\nfor _ in range(600):\n    time.sleep(0.05)\n"
                                    "print('not interrupted')")
                while True:
                    msg = kc.get_iopub_msg(timeout=TIMEOUT)
                    if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
                        self.assertIn("started", msg["content"]["text"])
                        break
                # interrupt_mode "message": what KernelManager.interrupt_kernel sends, on this
                # client's control channel so that its reply is read here.
                kc.control_channel.send(kc.session.msg("interrupt_request", content={}))
                reply = kc.get_control_msg(timeout=TIMEOUT)
                self.assertEqual((reply["msg_type"], reply["content"]["status"]), ("interrupt_reply", "ok"))
                reply = kc.get_shell_msg(timeout=TIMEOUT)
                self.assertEqual(reply["parent_header"]["msg_id"], msg_id)
                self.assertEqual((reply["content"]["status"], reply["content"]["ename"]), ("error", "KeyboardInterrupt"))
                reply, out = run(kc, "print('after')")
                self.assertEqual((reply["status"], out), ("ok", "after\n"))
            finally:
                kc.stop_channels()
                km.shutdown_kernel()

    def test_a_restart_is_a_new_process_with_a_fresh_namespace(self):
        before = sessions()
        with tempfile.TemporaryFile("w+") as log:
            km, kc = start("cellvisor-python", log)
            try:
                run(kc, "kept = 1")
                first = sessions() - before
                pid = km.provisioner.pid
                km.restart_kernel()  # shutdown_request with restart: true, then a new kernel
                kc.wait_for_ready(timeout=TIMEOUT)
                self.assertNotEqual(km.provisioner.pid, pid)
                reply, out = run(kc, "print('kept' in globals())")
                self.assertEqual((reply["status"], out), ("ok", "False\n"))
                # The first kernel's session was closed with it.
                self.assertFalse(first & sessions(), first)
            finally:
                kc.stop_channels()
                km.shutdown_kernel()

    def kill_the_parent(self, name, kernel_dirs=()):
        """Starts `name` from a parent process, kills -9 the parent; the kernel's pid, once
        it ended, and the sessions it made."""
        before = sessions()
        parent = subprocess.Popen([sys.executable, "-c", PARENT, name, *kernel_dirs],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        kernel = None
        try:
            line = parent.stdout.readline()
            self.assertTrue(line.strip().isdigit(), line + parent.stderr.read() if not line else line)
            kernel = int(line)
            made = sessions() - before
            parent.kill()
            parent.wait()
            self.assertTrue(wait_pid_gone(kernel), "the kernel outlived the process that started it")
            return made
        finally:
            if parent.poll() is None:
                parent.kill()
                parent.wait()
            if kernel is not None and not pid_gone(kernel):
                os.kill(kernel, signal.SIGKILL)

    def test_the_kernel_ends_with_the_process_that_started_it_closing_its_own_session(self):
        made = self.kill_the_parent("cellvisor-python")
        self.assertEqual(len(made), 1, made)
        (own,) = made
        self.assertTrue(own.startswith("kernel-"), own)
        deadline = time.monotonic() + TIMEOUT
        while own in sessions() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertNotIn(own, sessions())

    def test_a_sigkilled_kernel_leaves_no_session_behind_but_an_attached_one_stays(self):
        # Its own session: owned by the kernel's connection, closed by the daemon when the
        # killed kernel's connection drops (no idle eviction in the test daemon).
        before = sessions()
        with tempfile.TemporaryFile("w+") as log:
            km, kc = start("cellvisor-python", log)
            try:
                reply, _ = run(kc, "x = 1")
                self.assertEqual(reply["status"], "ok")
                made = sessions() - before
                self.assertEqual(len(made), 1, made)
                (own,) = made
                os.kill(km.provisioner.pid, signal.SIGKILL)
                self.assertTrue(wait_pid_gone(km.provisioner.pid), "the kernel outlived SIGKILL")
                deadline = time.monotonic() + TIMEOUT
                while own in sessions() and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.assertNotIn(own, sessions())
            finally:
                kc.stop_channels()
                km.shutdown_kernel(now=True)
        # An attached session is the agent's: a killed kernel leaves it as it was.
        with tempfile.TemporaryFile("w+") as log:
            km, kc = start("cellvisor-python", log, [ATTACHED_KERNELS])
            try:
                reply, _ = run(kc, "left_by_a_killed_kernel = 7")
                self.assertEqual(reply["status"], "ok")
                os.kill(km.provisioner.pid, signal.SIGKILL)
                self.assertTrue(wait_pid_gone(km.provisioner.pid), "the kernel outlived SIGKILL")
            finally:
                kc.stop_channels()
                km.shutdown_kernel(now=True)
        after = subprocess.run(
            [CELLVISOR, "eval", "-s", ATTACHED_SESSION, "-l", "py", "print(left_by_a_killed_kernel)"],
            capture_output=True, text=True)
        self.assertEqual(after.stdout.strip(), "7", after.stderr)

    def test_a_kernel_attached_to_a_session_ends_with_its_parent_and_leaves_the_session(self):
        self.kill_the_parent("cellvisor-python", [ATTACHED_KERNELS])
        self.assertIn(ATTACHED_SESSION, sessions())
        after = subprocess.run(
            [CELLVISOR, "eval", "-s", ATTACHED_SESSION, "-l", "py", "print(from_the_parent)"],
            capture_output=True, text=True)
        self.assertEqual(after.stdout.strip(), "5", after.stderr)

    def test_shutdown_or_sigterm_while_a_cell_runs_ends_the_kernel_and_closes_its_session(self):
        for how in ("shutdown_request", "SIGTERM"):
            before = sessions()
            with tempfile.TemporaryFile("w+") as log:
                km, kc = start("cellvisor-python", log)
                try:
                    run(kc, "import time")
                    (own,) = sessions() - before
                    msg_id = kc.execute("print('started', flush=True)\ntime.sleep(600)")
                    while True:
                        msg = kc.get_iopub_msg(timeout=TIMEOUT)
                        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
                            break
                    if how == "SIGTERM":
                        os.kill(km.provisioner.pid, signal.SIGTERM)
                    else:
                        kc.shutdown()
                        reply = kc.get_control_msg(timeout=TIMEOUT)
                        self.assertEqual(reply["msg_type"], "shutdown_reply")
                    # Long before the cell's 600 s.
                    self.assertTrue(wait_gone(km, within=TIMEOUT), f"{how}: the kernel waited for its cell")
                finally:
                    kc.stop_channels()
                    km.shutdown_kernel(now=True)
                self.assertNotIn(own, sessions(), how)

    def test_an_interrupt_of_an_idle_attached_kernel_leaves_the_agents_cell_running(self):
        with tempfile.TemporaryDirectory() as scratch, tempfile.TemporaryFile("w+") as log:
            started = os.path.join(scratch, "started")
            km, kc = start("cellvisor-python", log, kernel_dirs=[ATTACHED_KERNELS])
            agent = None
            try:
                run(kc, "import time")
                code = f"open({started!r}, 'w').close()\ntime.sleep(2)\nprint('agent done')"
                agent = subprocess.Popen([CELLVISOR, "eval", "-s", ATTACHED_SESSION, "-l", "py", code],
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                deadline = time.monotonic() + TIMEOUT
                while not os.path.exists(started) and time.monotonic() < deadline:
                    time.sleep(0.02)
                self.assertTrue(os.path.exists(started), "the agent's cell did not start")
                kc.control_channel.send(kc.session.msg("interrupt_request", content={}))
                reply = kc.get_control_msg(timeout=TIMEOUT)
                self.assertEqual((reply["msg_type"], reply["content"]["status"]), ("interrupt_reply", "ok"))
                out, err = agent.communicate(timeout=TIMEOUT)
                self.assertEqual((agent.returncode, out.strip()), (0, "agent done"), err)
            finally:
                if agent is not None and agent.poll() is None:
                    agent.kill()
                    agent.wait()
                kc.stop_channels()
                km.shutdown_kernel()

    def test_session_attaches_and_is_left_open(self):
        earlier = subprocess.run(
            [CELLVISOR, "eval", "-s", ATTACHED_SESSION, "-l", "py", "earlier = 41"],
            capture_output=True, text=True)
        self.assertEqual(earlier.returncode, 0, earlier.stderr)
        with tempfile.TemporaryFile("w+") as log:
            km, kc = start("cellvisor-python", log, kernel_dirs=[ATTACHED_KERNELS])
            try:
                reply, out = run(kc, "print(earlier + 1)")
                self.assertEqual((reply["status"], out), ("ok", "42\n"))
                run(kc, "later = 7")
                kc.shutdown()
                self.assertTrue(wait_gone(km), "the attached kernel did not end on shutdown_request")
            finally:
                kc.stop_channels()
                km.shutdown_kernel(now=True)
        self.assertIn(ATTACHED_SESSION, sessions())
        after = subprocess.run(
            [CELLVISOR, "eval", "-s", ATTACHED_SESSION, "-l", "py", "print(earlier, later)"],
            capture_output=True, text=True)
        self.assertEqual(after.stdout.strip(), "41 7", after.stderr)

    def test_shutdown_ends_the_process_and_closes_its_own_session(self):
        before = sessions()
        with tempfile.TemporaryFile("w+") as log:
            km, kc = start("cellvisor-lua", log)
            try:
                reply, out = run(kc, "x = 1; print(x)")
                self.assertEqual((reply["status"], out), ("ok", "1\n"))
                own = sessions() - before
                self.assertEqual(len(own), 1, own)
                (own,) = own
                self.assertTrue(own.startswith("kernel-"), own)
                kc.shutdown()
                reply = kc.get_control_msg(timeout=TIMEOUT)
                self.assertEqual(reply["msg_type"], "shutdown_reply")
                self.assertTrue(wait_gone(km), "the kernel did not end on shutdown_request")
            finally:
                kc.stop_channels()
                km.shutdown_kernel(now=True)
        self.assertNotIn(own, sessions())


if __name__ == "__main__":
    unittest.main()
