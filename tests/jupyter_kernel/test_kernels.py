"""jupyter_kernel_test's conformance suite for the three cellvisor kernelspecs.

Run by tests/zmq_kernel.rs with JUPYTER_PATH pointing at kernelspecs `cellvisor kernel
install --prefix` wrote and CELLVISOR_SOCKET at a test daemon. A trailing value reaches
cellvisor's front ends as stream text, not `execute_result`, so `code_execute_result` (which
jupyter_kernel_test's own history test also reads) is left out; `HistoryTests` below covers
`history_request` through the same helpers and schema checks.
"""

import unittest

import jupyter_kernel_test
from jupyter_kernel_test.msgspec_v5 import validate_message


class HistoryTests:
    """`history_request` (tail, range, search) after cells the test ran."""

    history_codes: list = []
    history_pattern = ""

    def test_history_tail_range_and_search(self):
        codes = self.history_codes
        reply = self.history_helper(codes, output=False, raw=True, hist_access_type="tail", n=len(codes))
        history = reply["content"]["history"]
        self.assertEqual([h[2] for h in history], codes)
        session, start = history[0][0:2]
        reply = self.history_helper([], output=True, raw=True, hist_access_type="tail", n=1)
        self.assertEqual(len(reply["content"]["history"][0][2]), 2)
        reply = self.history_helper(
            [], output=False, raw=True, hist_access_type="range", session=session, start=start, stop=start + 1
        )
        self.assertEqual(reply["content"]["history"], [[session, start, codes[0]]])
        reply = self.history_helper(
            codes, output=False, raw=True, hist_access_type="search", pattern=self.history_pattern, unique=True
        )
        self.assertEqual(len(reply["content"]["history"]), 1)
        reply = self.history_helper(
            [], output=False, raw=True, hist_access_type="search", pattern=self.history_pattern, n=2
        )
        self.assertEqual(len(reply["content"]["history"]), 2)

    def test_silent_and_failed_executions(self):
        self.flush_channels()
        reply, outputs = self.execute_helper(self.history_codes[0], silent=True)
        self.assertEqual(reply["content"]["status"], "ok")
        self.assertEqual(outputs, [])
        # A failure aborts the request queued behind it, as ipykernel does. The failure comes
        # two seconds in, so that the second request is queued (sent before the error reply)
        # even on a loaded machine; one sent after the reply runs (test_behaviour.py).
        failing = self.kc.execute(self.code_slow_error)
        queued = self.kc.execute(self.code_hello_world)
        replies = {}
        while len(replies) < 2:
            msg = self.kc.get_shell_msg(timeout=15)
            if msg["content"]["status"] != "aborted":
                # ipykernel's "aborted", which this jupyter_kernel_test's schema spells "abort".
                validate_message(msg, "execute_reply", msg["parent_header"]["msg_id"])
            replies[msg["parent_header"]["msg_id"]] = msg["content"]["status"]
        self.assertEqual(replies, {failing: "error", queued: "aborted"})
        self.flush_channels()


class CellvisorPythonTests(HistoryTests, jupyter_kernel_test.KernelTests):
    kernel_name = "cellvisor-python"
    language_name = "python"
    file_extension = ".py"
    code_hello_world = "print('hello, world')"
    code_stderr = "import sys; print('test', file=sys.stderr)"
    code_generate_error = "raise ValueError('deliberate')"
    code_slow_error = "import time\ntime.sleep(2)\nraise ValueError('deliberate')"
    code_display_data = [
        {"code": "display({'a': 1})", "mime": "application/json"},
        {"code": "class H:\n    def _repr_html_(self):\n        return '<b>h</b>'\ndisplay(H())", "mime": "text/html"},
    ]
    completion_samples = [{"text": "zi", "matches": {"zip"}}, {"text": "str.isdig", "matches": {"str.isdigit"}}]
    complete_code_samples = ["1", "print('hello, world')", "def f(x):\n  return x*2\n\n\n"]
    incomplete_code_samples = ["print('''hello", "def f(x):\n  x*2", "for i in range(3):"]
    invalid_code_samples = ["x = )"]
    code_inspect_sample = "zip"
    history_codes = ["hist_a = 1", "hist_b = 2", "hist_a = 1"]
    history_pattern = "hist_a*"


class CellvisorJavaScriptTests(HistoryTests, jupyter_kernel_test.KernelTests):
    kernel_name = "cellvisor-javascript"
    language_name = "javascript"
    file_extension = ".js"
    code_hello_world = "console.log('hello, world')"
    code_stderr = "console.error('test')"
    code_generate_error = "throw new Error('deliberate')"
    code_slow_error = "const t0 = Date.now(); while (Date.now() - t0 < 2000) {} throw new Error('deliberate')"
    code_display_data = [{"code": "display({a: 1})", "mime": "application/json"}]
    completion_samples = [{"text": "Math.fl", "matches": {"Math.floor"}}]
    complete_code_samples = ["1", "console.log('hello, world')", "function f(x) { return x * 2 }"]
    incomplete_code_samples = ["function f(x) {", "[1, 2,"]
    invalid_code_samples = ["x = )"]
    code_inspect_sample = "Math"
    history_codes = ["var histA = 1", "var histB = 2", "var histA = 1"]
    history_pattern = "var histA*"


class CellvisorLuaTests(HistoryTests, jupyter_kernel_test.KernelTests):
    kernel_name = "cellvisor-lua"
    language_name = "lua"
    file_extension = ".lua"
    code_hello_world = "print('hello, world')"
    code_stderr = "io.stderr:write('test\\n')"
    code_generate_error = "error('deliberate')"
    code_slow_error = "local t0 = os.time(); while os.time() - t0 < 2 do end; error('deliberate')"
    code_display_data = [{"code": "display({a = 1})", "mime": "application/json"}]
    completion_samples = [{"text": "string.up", "matches": {"string.upper"}}]
    complete_code_samples = ["x = 1", "print('hello, world')", "function f(x) return x * 2 end"]
    incomplete_code_samples = ["function f(x)", "for i = 1, 3 do", "t = {1, 2,"]
    invalid_code_samples = ["x = )"]
    code_inspect_sample = "string"
    history_codes = ["hist_a = 1", "hist_b = 2", "hist_a = 1"]
    history_pattern = "hist_a*"


if __name__ == "__main__":
    unittest.main()
