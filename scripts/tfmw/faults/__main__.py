"""`python -m tfmw.faults`: the harness's command line (tfmw.faults.cli)."""

import sys

from tfmw.faults.cli import main

sys.exit(main())
