"""nbclient runs every notebook in examples/notebooks through cellvisor's Python kernelspec
and through ipykernel, and their outputs agree up to timings and addresses.

cellvisor's kernel runs each notebook with this venv as its `VIRTUAL_ENV`, so the cells run
in IPython's own shell (the venv has IPython, as ipykernel's has); a notebook that does not
import IPython runs a second time without it, in the built-in emulation of the test
daemon's Python.

Run by tests/zmq_kernel.rs with JUPYTER_PATH holding the cellvisor kernelspecs and
CELLVISOR_SOCKET at a test daemon; ipykernel is this venv's own `python3` kernel.
"""

import contextlib
import os
import pathlib
import re
import sys
import tempfile
import unittest

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = sorted((pathlib.Path(__file__).resolve().parents[2] / "examples" / "notebooks").glob("*.ipynb"))
ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


@contextlib.contextmanager
def virtual_env(path):
    """`VIRTUAL_ENV` as `path` (none for None) for the kernels started meanwhile."""
    before = os.environ.pop("VIRTUAL_ENV", None)
    if path is not None:
        os.environ["VIRTUAL_ENV"] = path
    try:
        yield
    finally:
        os.environ.pop("VIRTUAL_ENV", None)
        if before is not None:
            os.environ["VIRTUAL_ENV"] = before


def outputs(path, kernel_name, venv=sys.prefix):
    """Each code cell's outputs after nbclient ran the notebook in `kernel_name` (errors
    allowed, as the notebooks show some), read as a comparable form: consecutive stream text
    joined, errors by name and value, addresses masked. Between two other outputs, stdout's
    text and stderr's are compared each as a whole: how ipykernel interleaves them is a
    matter of its flush timer (a fast cell's stderr comes after its stdout, whatever it
    printed first)."""
    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as cwd, virtual_env(venv):
        client = NotebookClient(nb, kernel_name=kernel_name, timeout=60, allow_errors=True,
                                resources={"metadata": {"path": cwd}})
        client.execute()
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        read = []
        for out in cell.outputs:
            kind = out["output_type"]
            if kind == "stream":
                text = ADDRESS.sub("0x…", out["text"])
                if read and read[-1][0] == "stream" and read[-1][1] == out["name"]:
                    read[-1] = ("stream", out["name"], read[-1][2] + text)
                else:
                    read.append(("stream", out["name"], text))
            elif kind == "error":
                read.append(("error", out["ename"], out["evalue"]))
            else:
                data = {k: ADDRESS.sub("0x…", v) if isinstance(v, str) else v for k, v in out["data"].items()}
                read.append((kind, data))
        cells.append((cell.source, streams_apart(read)))
    return cells


def streams_apart(read):
    """`read` with each run of stream outputs as one stderr then one stdout entry."""
    out, run = [], {}
    for item in read + [None]:
        if item is not None and item[0] == "stream":
            run[item[1]] = run.get(item[1], "") + item[2]
            continue
        out.extend(("stream", name, run[name]) for name in sorted(run))
        run = {}
        if item is not None:
            out.append(item)
    return out


def uses_ipython(path):
    return any("IPython" in cell.source for cell in nbformat.read(path, as_version=4).cells)


class Notebooks(unittest.TestCase):
    def test_every_notebook_runs_as_through_ipykernel(self):
        self.assertGreaterEqual(len(NOTEBOOKS), 3, "the notebooks in examples/notebooks")
        kinds, mimes = set(), set()
        for path in NOTEBOOKS:
            theirs = outputs(path, "python3")
            shells = {"IPython's shell": sys.prefix}
            if not uses_ipython(path):
                shells["the built-in emulation"] = None
            for shell, venv in shells.items():
                with self.subTest(notebook=path.name, shell=shell):
                    ours = outputs(path, "cellvisor-python", venv)
                    self.assertEqual(len(ours), len(theirs))
                    for (source, got), (_, want) in zip(ours, theirs):
                        self.assertEqual(got, want, f"cell:\n{source}")
                    for _, read in ours:
                        for out in read:
                            kinds.add(out[0])
                            if isinstance(out[-1], dict):
                                mimes.update(out[-1])
        # Between them the notebooks show every kind of output compared.
        self.assertLessEqual({"stream", "display_data", "error", "execute_result"}, kinds)
        self.assertLessEqual({"text/html", "text/markdown", "application/json", "image/png"}, mimes)

    def test_clear_output_leaves_what_a_notebook_shows(self):
        """The progress loop and the cleared cell of the analysis end as a notebook shows them."""
        path = next(p for p in NOTEBOOKS if p.name == "sales_analysis.ipynb")
        ours = outputs(path, "cellvisor-python")
        progress = next(read for source, read in ours if "clear_output(wait=True)" in source)
        self.assertEqual(progress[0][:2], ("stream", "stdout"))
        self.assertTrue(progress[0][2].startswith("processed 8/8 rows\nrevenue by month:"), progress)
        cleared = next(read for source, read in ours if "clear_output()" in source)
        self.assertEqual(cleared, [("stream", "stdout", "best month: apr\n")])


if __name__ == "__main__":
    unittest.main()
