"""make local."""

import sys

from .cli import main

sys.exit(main())
