"""make local."""

import sys

from tfmw.localrun.run import main

sys.exit(main())
