"""What the cellvisor kernel does beyond the conformance suite: a message signed with another
key is dropped (with a line in the kernel's log) and the kernel goes on serving; a kernelspec
installed with `--session` attaches to that session and sees what ran there before, and leaves
it open; a kernel of its own session ends its process and closes the session on shutdown.

Run by tests/zmq_kernel.rs: CELLVISOR_BIN is the binary, CELLVISOR_SOCKET the test daemon's,
JUPYTER_PATH holds the plain kernelspecs, CELLVISOR_ATTACHED_KERNELS the `--session` ones.
"""

import json
import os
import subprocess
import tempfile
import time
import unittest

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
    return {row["session"] for row in json.loads(out.stdout)}


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


class KernelBehaviour(unittest.TestCase):
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
