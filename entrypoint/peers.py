"""Wait until the peers' DNS names resolve, or a deadline passes; which peers a task needs.

A headless Service with publishNotReadyAddresses publishes a pod's A record as soon as
the pod has an IP, so "resolves" means "the pod exists and is scheduled". TensorFlow's
own group formation then waits for the gRPC servers. Resolver, clock and sleep are
injected so the logic tests without DNS or real time.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

from . import loglines
from .errors import PeersNotFound

Resolver = Callable[[str], bool]
PEERS_HINT = "check that those pods are scheduled (kubectl get pods) or raise peers.timeoutSeconds"


def dns_resolves(host: str) -> bool:
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        return True
    except (socket.gaierror, UnicodeError, OSError):
        return False


def wait_for_peers(
    hosts: Iterable[str],
    timeout_seconds: float,
    resolve: Resolver = dns_resolves,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    log: Callable[[str], None] = print,
    first_delay: float = 0.25,
    max_delay: float = 5.0,
    log_every_seconds: float = 10.0,
    ready: str = "resolved",
    hint: str = PEERS_HINT,
) -> float:
    """Block until all hosts resolve; return the seconds waited.

    Raises PeersNotFound naming the hosts still missing at the deadline. Backoff doubles
    from `first_delay` to `max_delay`; progress is logged at most every
    `log_every_seconds` so `kubectl logs` shows why a pod is not training yet. `ready`
    says what `resolve` checks ("reachable" for port_accepts), `hint` what to do at the deadline.
    """
    pending = list(dict.fromkeys(hosts))
    total = len(pending)
    start = clock()
    deadline = start + timeout_seconds
    delay = first_delay
    last_log = None
    while True:
        pending = _still_pending(pending, resolve)
        now = clock()
        if not pending:
            waited = now - start
            log(loglines.line(loglines.LAUNCHER, text=f"peers: all {total} {ready} after {waited:.1f}s"))
            return waited
        if now >= deadline:
            raise PeersNotFound(
                f"peers not found after {timeout_seconds:g}s: {len(pending)} of {total} never {ready}: "
                f"{_names(pending)}; {hint}"
            )
        if last_log is None or now - last_log >= log_every_seconds:
            log(
                loglines.line(
                    loglines.LAUNCHER,
                    text=f"peers: {total - len(pending)}/{total} {ready}, waiting "
                    f"for {_names(pending)} ({now - start:.0f}s of {timeout_seconds:g}s)",
                )
            )
            last_log = now
        sleep(min(delay, max(deadline - now, 0.0)))
        delay = min(delay * 2, max_delay)


def needed_peers(hosts: Sequence[str], rank: int) -> list[str]:
    """The peer names the task of `rank` must reach before its first step (pure), in TensorFlow
    2.21's MultiWorkerMirroredStrategy (docs/contracts.md, "Request budget"):
    - rank 0, the leader of the coordination service and of every collective group: each task
      registers with it, heartbeats to it and resolves its groups and instances through it
      (multi_worker_util.coordination_leader / collective_leader);
    - its ring predecessor, rank - 1 (wrapping): a RING all-reduce pulls each chunk from the
      previous rank (RingAlg::DispatchRecv, RecvBuf); a send only posts a local buffer;
    - its parent in the variable-initialisation broadcast tree, (rank - 1) // 2
      (HierarchicalTreeBroadcaster::TreeRecvFrom).
    Every other peer only connects to this task. TensorFlow dials the leader with wait-for-ready
    RPCs (a name that is late is retried); the other two are fail-fast RecvBuf calls, which is
    why they must resolve first. The chief (rank 0) waits for every name: the group cannot form
    without them, and its status names those still missing. So a group (re)start costs about
    N + 3N lookups, not N²."""
    if rank == 0:
        return list(dict.fromkeys(hosts))
    n = len(hosts)
    wanted = (0, (rank - 1) % n, (rank - 1) // 2)
    return list(dict.fromkeys(hosts[i] for i in wanted if i != rank))


# Lookups in flight at once during a peer wait: a pass over N names costs about ceil(N / 32)
# DNS round trips, not N.
PARALLEL_LOOKUPS = 32


def _still_pending(hosts: list[str], resolve: Resolver, parallel: int = PARALLEL_LOOKUPS) -> list[str]:
    """The hosts that do not resolve yet, looked up concurrently: with 1,000 workers one
    lookup at a time would make every pass cost N x the DNS latency."""
    if len(hosts) <= 1:
        return [h for h in hosts if not resolve(h)]
    with ThreadPoolExecutor(max_workers=min(parallel, len(hosts))) as pool:
        answers = list(pool.map(resolve, hosts))
    return [h for h, ok in zip(hosts, answers, strict=True) if not ok]


def _names(hosts: list[str], limit: int = 5) -> str:
    shown = ", ".join(hosts[:limit])
    return shown + (f" and {len(hosts) - limit} more" if len(hosts) > limit else "")


def port_accepts(port: int, connect_timeout: float = 5.0) -> Resolver:
    """A Resolver that asks more than DNS: the name resolves and `port` accepts a TCP
    connection, i.e. the worker's gRPC server is up (`check-peers --port`, the helm test)."""

    def accepts(host: str) -> bool:
        try:
            socket.create_connection((host, port), timeout=connect_timeout).close()
            return True
        except (OSError, UnicodeError, ValueError):
            return False

    return accepts
