"""make lint."""

import sys

from tfmw.lint.pipeline import main

sys.exit(main())
