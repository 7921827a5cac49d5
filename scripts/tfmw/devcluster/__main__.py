"""make cluster / cluster-load / cluster-down."""

import sys

from .cli import main

sys.exit(main())
