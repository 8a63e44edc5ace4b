#!/usr/bin/env python3
"""Runs cells on the cellvisor daemon and prints their output as it streams (the `cellvisor`
package's command line, `python -m cellvisor`, run from the source tree without installing):

    python3 scripts/cellvisor_client.py --session demo py 'x = 41' py 'print(x + 1)' js '6 * 7'
    python3 scripts/cellvisor_client.py --url wss://127.0.0.1:7420 --token-file token \
        --cafile cert.pem py 'print(6 * 7)'

The client itself is the package in clients/python (`pip install ./clients/python`, import
`cellvisor`); this file only puts its source on `sys.path` and re-exports its names, for the
callers that import `cellvisor_client` from this directory.
Start the daemon first (`cellvisor serve`, or any `cellvisor eval`, which starts one).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "clients", "python", "src"))  # the `cellvisor` package
from cellvisor import Client, ConnectError, Daemon, RpcError, default_socket, print_event  # noqa: E402,F401
from cellvisor.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(description=__doc__))
