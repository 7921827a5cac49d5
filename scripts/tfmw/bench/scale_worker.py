"""One process of figure 8's launchers: `--count` real launchers (the entrypoint's own
`Launcher`, from the source tree `--code`, so the committed base can be measured beside the
current code) in threads, each with its own pod environment, against the API server double
`--api-port`, with a counting resolver: every lookup of a worker's DNS name (the headless
Service's) is counted and answered with loopback, anything else goes to the real resolver.

The training command is a stub in sh (the bench measures the control path, not TensorFlow):
it writes the heartbeat every 2 s, the chief's logs a checkpoint every fifth beat (the chief
records it in the status ConfigMap), it stops beating while `<ctl>/stall` exists (a stalled
group), and it exits 75 (retryable: a broken group) once `<ctl>/gen` changes, so the parent
restarts every worker's training at once. Every 0.5 s the process writes its counts to
`<out>/counts-<first>.json` ({"dns": lookups, "started": launchers that started an attempt,
"attempts": attempts started}); SIGTERM stops every launcher as a pod's SIGTERM would.

Standard library only, and nothing of `entrypoint` before --code is on the path.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

STUB = r"""
read gen < "$TFMW_BENCH_CTL/gen"
echo "tfmw start run=bench worker=$TFMW_BENCH_ORDINAL/$TFMW_BENCH_N replicas=$TFMW_BENCH_N resume_step=0 steps=99999"
i=0
while :; do
  read g < "$TFMW_BENCH_CTL/gen"
  [ "$g" = "$gen" ] || exit 75
  if [ ! -e "$TFMW_BENCH_CTL/stall" ]; then
    i=$((i + 1))
    echo "$i train" > "$TFMW_HEARTBEAT_FILE"
    if [ "$TFMW_BENCH_ORDINAL" = 0 ] && [ $((i % 5)) = 0 ]; then
      echo "tfmw checkpoint saved step=$i path=/bench/ckpt-$i"
    fi
  fi
  sleep 2
done
"""
DOMAIN = ".svc.cluster.local"


class Counts:
    def __init__(self):
        self.lock = threading.Lock()
        self.dns = 0
        self.started: set[int] = set()
        self.attempts = 0

    def snapshot(self) -> dict:
        with self.lock:
            return {"dns": self.dns, "started": len(self.started), "attempts": self.attempts}


def counting_resolver(counts: Counts) -> None:
    """socket.getaddrinfo, counting each lookup of a worker's name and answering it with loopback."""
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if isinstance(host, str) and host.endswith(DOMAIN):
            with counts.lock:
                counts.dns += 1
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port or 0))]
        return real(host, port, *args, **kwargs)

    socket.getaddrinfo = getaddrinfo


def pod_env(args, ordinal: int) -> dict:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "TMPDIR": str(args.out),
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(args.api_port),
        "TFMW_API_DIR": str(args.api_dir),
        "TFMW_POD_NAME": f"train-{ordinal}",
        "TFMW_POD_UID": f"00000000-0000-0000-0000-{ordinal:012d}",
        "TFMW_NAMESPACE": "ml",
        "TFMW_STATEFULSET": "train",
        "TFMW_SERVICE": "train-headless",
        "TFMW_POD_SELECTOR": args.selector,
        "TFMW_STATUS_CONFIGMAP": "train-status",
        "TFMW_RUN_ID": "bench",
        "TFMW_SHARED_DIR": str(args.out / "shared"),
        "TFMW_POD_REVISION": "rev-a",
        "TFMW_ON_SUCCESS": "scaleToZero",
        "TFMW_ON_FAILURE": "scaleToZero",
        "TFMW_MAX_RESTARTS": "1000",
        "TFMW_WARM_STANDBY": "false",
        "TFMW_BENCH_CTL": str(args.ctl),
        "TFMW_BENCH_ORDINAL": str(ordinal),
        "TFMW_BENCH_N": str(args.n),
    }
    return env


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfmw.bench.scale_worker")
    parser.add_argument("--code", type=Path, required=True, help="the source tree whose entrypoint/ runs")
    parser.add_argument("--first", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--n", type=int, required=True, help="the group's size")
    parser.add_argument("--api-port", type=int, required=True)
    parser.add_argument("--api-dir", type=Path, required=True)
    parser.add_argument("--selector", required=True)
    parser.add_argument("--ctl", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.code))
    counts = Counts()
    counting_resolver(counts)
    launcher_module = importlib.import_module("entrypoint.launcher")
    launchers = []

    def log_for(ordinal: int):
        def log(line: str) -> None:
            if line.startswith("tfmw launcher starting training (attempt"):
                with counts.lock:
                    counts.started.add(ordinal)
                    counts.attempts += 1

        return log

    for ordinal in range(args.first, args.first + args.count):
        launcher = launcher_module.Launcher(
            pod_env(args, ordinal), ["sh", "-c", STUB], log=log_for(ordinal), flush_seconds=5, api_timeout=10
        )
        launchers.append(launcher)
        threading.Thread(target=launcher.run, name=f"launcher-{ordinal}", daemon=True).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    out = args.out / f"counts-{args.first}.json"
    while not stop.wait(0.5):
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(counts.snapshot()))
        tmp.replace(out)
    for launcher in launchers:
        launcher.request_stop()
    time.sleep(1.0)  # the stubs get SIGTERM from their supervisors
    out.write_text(json.dumps(counts.snapshot()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
