"""`python -m tfmw.bench`: the bench's command line (tfmw.bench.cli)."""

import sys

from tfmw.bench.cli import main

sys.exit(main())
