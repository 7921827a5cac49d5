import sys

from . import stopsignal

stopsignal.catch_early()  # first: a SIGTERM during the imports below must not be lost (PID 1)

from .cli import main  # noqa: E402

sys.exit(main())
