"""`make gpu-check` — what the first GPU host must show before a GPU hour is spent on a release.

    python -m tfmw.bench.gpucheck [--python PY] [--steps S] [--keep DIR]

Runs the built-in trainer (`python -m entrypoint.training`, the release's own code path) on
GPU 0 of this machine, three times:

1. `one`: 1 worker x 1 GPU, `collective: auto` (NCCL: GPUs are visible), `gpuMemory: growth`;
2. `two`: 2 workers sharing GPU 0 over RING, `gpuMemory: 0.45` each so both fit;
3. `again`: run 2 repeated, for a deterministic reference (TF_DETERMINISTIC_OPS=1 in every run).

and reports per run: the GPU name (the trainer's `tfmw gpus` line), the collective (its `tfmw
start` line), the seconds from the process start to the `tfmw start` line and to step 1 (the
first kernels: JIT-compiled into an empty CUDA cache by run 1, read from it after), whether the
trainer said the cache was empty, and the weights digest of each worker (`tfmw done`). It passes
when TensorFlow saw the GPU in every run, run 1 chose NCCL and runs 2 and 3 RING, both workers
of a run ended with the same weights, and runs 2 and 3 ended with the same digest. Exit 0 when it
passes, 1 when it does not; with no GPU at all it refuses in one line, exit 2, before starting
anything. `--python` names the interpreter whose TensorFlow has CUDA (`tensorflow[and-cuda]`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from entrypoint import loglines

from . import gpus as gpu_count
from .procs import REPO, free_ports, tf_config

CONFIG = """\
steps: {steps}
logEverySteps: 1
batchSizePerReplica: 64
collective: {collective}
gpuMemory: {memory}
checkpoint: {{everySteps: {steps}}}
tensorboard: {{enabled: false}}
"""
# (name, workers, collective, gpuMemory)
RUNS = (("one", 1, "auto", "growth"), ("two", 2, "ring", 0.45), ("again", 2, "ring", 0.45))
EXPECTED_COLLECTIVE = {"one": "nccl", "two": "ring", "again": "ring"}
TIMEOUT = 1800.0  # a run: a cold JIT compile of every kernel may take many minutes


@dataclass
class Worker:
    """One trainer process's lines, each with the seconds since the process started."""

    lines: list[tuple[float, str]] = field(default_factory=list)
    code: int | None = None


@dataclass(frozen=True)
class RunReport:
    name: str
    gpu_names: str  # "" when no worker saw a GPU
    visible: int  # fewest GPUs a worker saw
    collective: str  # from the `tfmw start` line; "" when none came
    memory: str
    start_seconds: float | None  # process start -> `tfmw start` (slowest worker)
    first_step_seconds: float | None  # process start -> step 1 (slowest worker)
    cold_cache: bool  # a worker said the CUDA cache was empty (the first kernels were JIT-compiled)
    digests: tuple[str, ...]  # one per worker that finished
    codes: tuple[int | None, ...]
    error: str  # the first `tfmw error` line's text or a worker's last line, when a worker failed


def _first(lines, kind: str, head: str = ""):
    for seconds, raw in lines:
        parsed = loglines.said(raw, kind, head)
        if parsed is not None:
            return seconds, parsed
    return None, None


def _first_step(lines):
    for seconds, raw in lines:
        if loglines.progress_step(raw, prefixed=False) == 1:
            return seconds
    return None


def _slowest(values):
    known = [v for v in values if v is not None]
    return max(known) if len(known) == len(values) and known else None


def summarize(name: str, workers: list[Worker]) -> RunReport:
    """A run's report from its workers' recorded lines (pure)."""
    gpu_lines = [_first(w.lines, loglines.GPUS)[1] for w in workers]
    starts = [_first(w.lines, loglines.START) for w in workers]
    dones = [_first(w.lines, loglines.DONE)[1] for w in workers]
    names = sorted({g.fields.get("names", "") for g in gpu_lines if g is not None} - {""})
    visible = min((int(g.fields.get("visible", "0")) if g is not None else 0) for g in gpu_lines)
    error = ""
    for w in workers:
        _, failed = _first(w.lines, loglines.ERROR)
        if failed is not None or (w.code not in (0, None) and w.lines):
            error = loglines.error_text(failed) if failed is not None else w.lines[-1][1]
            break
    return RunReport(
        name=name,
        gpu_names=",".join(names),
        visible=visible,
        collective=starts[0][1].fields.get("collective", "") if starts[0][1] is not None else "",
        memory=gpu_lines[0].fields.get("memory", "") if gpu_lines[0] is not None else "",
        start_seconds=_slowest([s for s, _ in starts]),
        first_step_seconds=_slowest([_first_step(w.lines) for w in workers]),
        cold_cache=any(_first(w.lines, loglines.WARNING, "first CUDA kernels")[1] is not None for w in workers),
        digests=tuple(d.fields.get("weights_digest", "") for d in dones if d is not None),
        codes=tuple(w.code for w in workers),
        error=error,
    )


def verdict(reports: list[RunReport]) -> list[tuple[bool, str]]:
    """(passed, what) per check, in the order docs/image.md lists them (pure)."""
    by_name = {r.name: r for r in reports}
    checks = []
    for r in reports:
        checks.append(
            (bool(r.codes) and all(c == 0 for c in r.codes), f"{r.name}: every worker exit 0 {list(r.codes)}")
        )
        checks.append((r.visible >= 1, f"{r.name}: TensorFlow saw the GPU (visible={r.visible})"))
        want = EXPECTED_COLLECTIVE.get(r.name)
        checks.append((r.collective == want, f"{r.name}: collective {r.collective or '?'} (expected {want})"))
        same = len(r.digests) == len(r.codes) and len(set(r.digests)) == 1
        checks.append((same, f"{r.name}: every worker ended with the same weights"))
    two, again = by_name.get("two"), by_name.get("again")
    if two and again:
        equal = len(set(two.digests)) == 1 and set(two.digests) == set(again.digests)
        checks.append((equal, "two == again: 2 workers on one GPU over RING train to the same weights twice"))
    return checks


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def report_lines(reports: list[RunReport]) -> list[str]:
    """The report: one `gpu-check` line per run, then one per check, then the outcome (pure)."""
    out = []
    for r in reports:
        out.append(
            f"gpu-check {r.name}: gpu={r.gpu_names or 'none'} collective={r.collective or '?'} "
            f"memory={r.memory or '?'} "
            f"start_s={_seconds(r.start_seconds)} first_step_s={_seconds(r.first_step_seconds)} "
            f"cuda_cache={'cold (JIT-compiled)' if r.cold_cache else 'warm'} "
            f"digest={(r.digests[0][:16] if r.digests else '-')}" + (f" error={r.error}" if r.error else "")
        )
    checks = verdict(reports)
    out += [f"gpu-check {'ok  ' if ok else 'FAIL'} {what}" for ok, what in checks]
    failed = sum(1 for ok, _ in checks if not ok)
    out.append("gpu-check: passed" if not failed else f"gpu-check: {failed} check(s) failed")
    return out


def _follow(stream, worker: Worker, started: float) -> None:
    for raw in stream:
        worker.lines.append((time.monotonic() - started, raw.rstrip("\n")))


def run_group(python: str, config: Path, workers: int, env_extra: dict, timeout: float) -> list[Worker]:
    """`workers` trainer processes on loopback, each line stamped as it comes."""
    ports = free_ports(workers)
    procs, recorded, readers = [], [], []
    for i in range(workers):
        env = dict(os.environ, PYTHONUNBUFFERED="1", TF_DETERMINISTIC_OPS="1", **env_extra)
        env.pop("TF_CONFIG", None)
        if workers > 1:
            env["TF_CONFIG"] = tf_config(ports, i)
        started = time.monotonic()
        proc = subprocess.Popen(
            [python, "-m", "entrypoint.training", "--config", str(config)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        worker = Worker()
        reader = threading.Thread(target=_follow, args=(proc.stdout, worker, started), daemon=True)
        reader.start()
        procs.append(proc)
        recorded.append(worker)
        readers.append(reader)
    deadline = time.monotonic() + timeout
    try:
        for proc, worker in zip(procs, recorded, strict=True):
            try:
                worker.code = proc.wait(timeout=max(deadline - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                worker.lines.append((timeout, f"gpu-check: no exit within {timeout:.0f}s"))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for reader in readers:
            reader.join(timeout=5)
    return recorded


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m tfmw.bench.gpucheck", description=__doc__.split("\n")[0])
    parser.add_argument("--python", default=sys.executable, help="interpreter whose TensorFlow has CUDA")
    parser.add_argument("--steps", type=int, default=20, help="training steps per run (default 20)")
    parser.add_argument("--keep", default="", help="keep the runs' directories (and logs) in this folder")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.exit(2, f"gpu-check: --steps {args.steps}: must be 1 or more\n")
    return args


def main(argv=None, count=gpu_count.count, run=run_group, out=print) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    found, source = count()
    if found == 0:
        sys.stderr.write(f"gpu-check: no GPU visible: 0 found ({source}); run it on a GPU host (docs/image.md)\n")
        return 2
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="tfmw-gpucheck-"))
    work.mkdir(parents=True, exist_ok=True)
    # One JIT cache for all runs, empty at first: run 1 shows the cold compile, runs 2-3 the warm start.
    env = {"CUDA_VISIBLE_DEVICES": "0", "CUDA_CACHE_PATH": str(work / "cuda-cache"), "TFMW_SHARED_DIR": str(work)}
    reports = []
    for name, workers, collective, memory in RUNS:
        config = work / f"{name}.yaml"
        config.write_text(CONFIG.format(steps=args.steps, collective=collective, memory=memory))
        out(f"gpu-check: {name}: {workers} worker(s) on GPU 0, collective {collective}, gpuMemory {memory}")
        recorded = run(args.python, config, workers, {**env, "TFMW_RUN_ID": name}, TIMEOUT)
        for i, worker in enumerate(recorded):
            (work / f"{name}-worker{i}.log").write_text(
                "\n".join(f"{s:9.2f} {line}" for s, line in worker.lines) + "\n"
            )
        reports.append(summarize(name, recorded))
    lines = report_lines(reports)
    for line in lines:
        out(line)
    out(f"gpu-check: logs in {work}")
    return 0 if lines[-1] == "gpu-check: passed" else 1


if __name__ == "__main__":
    sys.exit(main())
