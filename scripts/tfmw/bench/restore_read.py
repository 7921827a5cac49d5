"""Restore read once? Every worker reading the checkpoint (the trainer's restore_latest) against the
chief reading it and broadcasting over the collective, measured with real MWMS processes on this
machine (restore_worker.py), and the arithmetic of both at scale (docs/contracts.md).

    python -m tfmw.bench.restore_read [--workers 2,4] [--rounds N] [model=shape[:arg=v,...]]
        (default: mlp=28,28:hidden=2304,layers=6, a 340 MB checkpoint with Adam's slots)

Prints one `tfmw bench restore=<json>` line per group size (the chief's times, medians and
spread) and a table. Raises BenchError when the workers disagree on what they restored.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile

from entrypoint import loglines

from .checkpoint_save import parse_model
from .procs import BenchError, run_workers
from .restore_worker import RESTORE

DEFAULT_MODEL = "mlp=28,28:hidden=2304,layers=6"
GROUPS = (2, 4)
ROUNDS = 3


def shared_read_bytes(workers: int, checkpoint: int, chief_only: bool) -> int:
    """Bytes read from the shared volume per restart (pure)."""
    return checkpoint if chief_only else workers * checkpoint


def broadcast_bytes(workers: int, checkpoint: int) -> int:
    """Bytes a broadcast of the checkpoint delivers over the network: each of the other workers
    receives it once, whatever the tree or ring that carries it (pure)."""
    return (workers - 1) * checkpoint


def measure(workers: int, model: str, rounds: int) -> dict:
    name, shape, args = parse_model(model)
    with tempfile.TemporaryDirectory(prefix="tfmw-bench-restore-") as folder:
        plan = {"dir": folder, "model": name, "shape": shape, "args": args, "rounds": rounds}

        outputs = run_workers(["tfmw.bench.restore_worker", json.dumps(plan)], workers, timeout=900)
    results = [loglines.payloads(out.splitlines(), loglines.BENCH, RESTORE)[0] for out in outputs]
    sums = {json.dumps(r["checksum"], sort_keys=True) for r in results}
    chief = results[0]
    if len(sums) != 1 or chief["checksum"]["every"] != chief["checksum"]["chief"] or not chief["checksum"]["every"]:
        raise BenchError(f"restore: the workers restored different values: {[r['checksum'] for r in results]}")
    every, bcast = chief["every_s"], chief["chief_s"]
    return {
        "workers": workers,
        "model": model,
        "bytes": chief["bytes"],
        "every_s": statistics.median(every),
        "chief_s": statistics.median(bcast),
        "every_all": every,
        "chief_all": bcast,
        "ratio": statistics.median(bcast) / statistics.median(every),
    }


def main(argv: list[str]) -> int:
    groups, rounds, model = GROUPS, ROUNDS, DEFAULT_MODEL
    while argv[:1] in (["--workers"], ["--rounds"]):
        if argv[0] == "--workers":
            groups = tuple(int(n) for n in argv[1].split(","))
        else:
            rounds = int(argv[1])
        argv = argv[2:]
    model = argv[0] if argv else model
    print("| workers | checkpoint MB | every worker reads (s) | chief reads + broadcast (s) | ratio |")
    print("|---|---|---|---|---|")
    for workers in groups:
        result = measure(workers, model, rounds)
        print(loglines.payload_line(loglines.BENCH, RESTORE, result), flush=True)
        spread = lambda xs: f"{min(xs):.2f}-{max(xs):.2f}"  # noqa: E731
        print(
            f"| {workers} | {result['bytes'] / 1e6:.0f} | {result['every_s']:.2f} ({spread(result['every_all'])}) "
            f"| {result['chief_s']:.2f} ({spread(result['chief_all'])}) | {result['ratio']:.2f}x |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
