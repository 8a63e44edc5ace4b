"""Tests of scripts/gen_clients.py: the checked-in client types are what the checked-in
schema generates, and a schema the clients do not follow (a Rust field renamed, the schema
regenerated, the clients not) fails `--check` with a diff naming the field.
Run: python3 -m unittest discover -s scripts -p 'test_gen_clients.py'"""

import copy
import io
import json
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_clients  # noqa: E402


def checked_in_schema():
    return json.loads(gen_clients.SCHEMA.read_text())


class GeneratedClients(unittest.TestCase):
    def test_the_checked_in_types_are_what_the_schema_generates(self):
        self.assertEqual(gen_clients.differences(checked_in_schema()), [])

    def test_a_renamed_field_the_clients_do_not_follow_fails_the_check(self):
        doc = copy.deepcopy(checked_in_schema())
        cell = doc["$defs"]["CellResult"]
        cell["properties"]["cell_ident"] = cell["properties"].pop("cell_id")
        cell["required"] = ["cell_ident" if r == "cell_id" else r for r in cell["required"]]
        diffs = gen_clients.differences(doc)
        self.assertEqual(len(diffs), 2, "both clients' files differ")
        self.assertTrue(all("cell_ident" in d for d in diffs))
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as mutated:
            json.dump(doc, mutated)
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = gen_clients.main(["--check", "--schema", mutated.name])
        Path(mutated.name).unlink()
        self.assertEqual(code, 1)
        self.assertIn("+  cell_ident: number;", out.getvalue())
        self.assertIn("protocol schema", err.getvalue(), "says how to regenerate")

    def test_a_new_error_code_reaches_both_clients(self):
        doc = copy.deepcopy(checked_in_schema())
        doc["errors"]["SOMETHING_NEW"] = {"code": -32099, "description": "A new refusal."}
        ts, py = gen_clients.typescript(doc), gen_clients.python(doc)
        self.assertIn("SOMETHING_NEW: -32099,", ts)
        self.assertIn("SOMETHING_NEW = -32099", py)

    def test_an_unreadable_schema_is_a_clear_error(self):
        err = io.StringIO()
        with redirect_stderr(err):
            code = gen_clients.main(["--check", "--schema", "/nonexistent/protocol.json"])
        self.assertEqual(code, 2)
        self.assertIn("cannot read the schema", err.getvalue())

    def test_the_generated_python_imports_and_names_the_protocol(self):
        namespace = {}
        exec(compile(gen_clients.python(checked_in_schema()), "_generated.py", "exec"), namespace)
        self.assertEqual(namespace["EVAL"], "eval")
        self.assertEqual(namespace["ERROR_CODES"]["METHOD_NOT_FOUND"], -32601)
        self.assertIn("files/list", namespace["METHODS"])


if __name__ == "__main__":
    unittest.main()
