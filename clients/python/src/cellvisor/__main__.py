"""`python -m cellvisor LANGUAGE CODE ...`: see `cellvisor.cli`."""

import sys

from .cli import main

sys.exit(main())
