"""nbclient runs the notebooks in examples/notebooks through cellvisor's Python kernelspec
and through ipykernel, and their outputs agree up to timings and addresses.

Run by tests/zmq_kernel.rs with JUPYTER_PATH holding the cellvisor kernelspecs and
CELLVISOR_SOCKET at a test daemon; ipykernel is this venv's own `python3` kernel.
"""

import pathlib
import re
import tempfile
import unittest

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = sorted((pathlib.Path(__file__).resolve().parents[2] / "examples" / "notebooks").glob("*.ipynb"))
ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def outputs(path, kernel_name):
    """Each code cell's outputs after nbclient ran the notebook in `kernel_name`, read as
    a comparable form: consecutive stream text joined, errors by name and value, addresses
    masked. Between two other outputs, stdout's text and stderr's are compared each as a
    whole: how ipykernel interleaves them is a matter of its flush timer (a fast cell's
    stderr comes after its stdout, whatever it printed first)."""
    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as cwd:
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


class Notebooks(unittest.TestCase):
    def test_notebooks_run_as_through_ipykernel(self):
        self.assertTrue(NOTEBOOKS, "no notebook in examples/notebooks")
        for path in NOTEBOOKS:
            with self.subTest(notebook=path.name):
                ours = outputs(path, "cellvisor-python")
                theirs = outputs(path, "python3")
                self.assertEqual(len(ours), len(theirs))
                for (source, got), (_, want) in zip(ours, theirs):
                    self.assertEqual(got, want, f"cell:\n{source}")
                # The notebook shows something of every kind it compares.
                kinds = {o[0] for _, read in ours for o in read}
                self.assertLessEqual({"stream", "display_data", "error"}, kinds)


if __name__ == "__main__":
    unittest.main()
