"""`ip` (iproute2): the one way the host tools change links and namespaces (`make local`'s pod
network, the dev cluster's nodes)."""

from __future__ import annotations

import subprocess


def ip_command(*args: str, check: bool = True, error: type[Exception] = RuntimeError) -> subprocess.CompletedProcess:
    """Run `ip ARGS` (iproute2); a failure with check raises `error` naming the command.
    The one way host tools change links and namespaces (make local, the cluster's node)."""
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise error(f"`ip {' '.join(args)}` failed: {proc.stderr.strip()}")
    return proc
