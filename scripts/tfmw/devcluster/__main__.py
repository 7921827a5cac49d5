"""make cluster / cluster-load / cluster-down."""

import sys

from tfmw.devcluster.cluster import main

sys.exit(main())
