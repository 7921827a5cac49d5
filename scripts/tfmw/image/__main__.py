"""make image."""

import sys

from tfmw.image.build import main

sys.exit(main())
