import os
import sys

from . import stopsignal

stopsignal.catch_early()  # first: a SIGTERM during the imports below must not be lost (PID 1)

from .standby import prestart  # noqa: E402  (standard library only)

# `run`: the first attempt's standby starts now, so TensorFlow's import overlaps everything the
# launcher does before its first attempt, its own imports below included (~0.2 s).
first_standby = prestart(sys.argv[1:], os.environ, stopping=stopsignal.caught())

from .cli import main  # noqa: E402
from .reaper import become_subreaper  # noqa: E402

# This process is the container's PID 1, or the launcher of `make local`: what the training
# command leaves behind is its to end and reap (entrypoint.reaper). Only here, where the whole
# process is the launcher's, never when another program runs the launcher inside itself.
if not become_subreaper():
    print(
        "tfmw launcher reaper: cannot become a child subreaper (prctl refused); processes a command "
        "leaves outside its session are not ended",
        flush=True,
    )

try:
    code = main(first_standby=first_standby)
finally:
    first_standby.discard()  # never outlives the launcher (taken by the first attempt: nothing)
sys.exit(code)
