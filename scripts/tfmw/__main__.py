"""the tfmw command (python -m tfmw)."""

import sys

from tfmw.cli import main

sys.exit(main())
