import sys

from scripts.kube.node.agent import main

sys.exit(main())
