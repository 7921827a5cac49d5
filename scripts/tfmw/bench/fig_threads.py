"""Figure 9: TensorFlow's threads under a CPU limit — sized to the quota, or TensorFlow's own.

A cgroup of the figure's own with a CFS quota of QUOTA_CPUS (what `workers.resources.limits.cpu`
gives a container), on a machine that shows more cores. In it, one process at a time runs the
bench's step of the default model (scripts/tfmw/bench/mwms_step.py: the trainer's step function,
data in memory, one worker), alternately:
- sized: the pools the trainer picks for that quota (entrypoint.training.threads.plan), passed
  as TensorFlow's own variables;
- TensorFlow's default: neither variable set, so TensorFlow sizes its pools to the cores.
Each run's step time, and the cgroup's throttled periods over the run (`cpu.stat`: nr_throttled
of nr_periods), paired per round with the order alternating.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from entrypoint.training import threads

from . import plots, stats
from .fig_overhead import BATCH, plan
from .figure import BenchRun, measured
from .parse import bench_cases
from .procs import PY, REPO, BenchError, base_env
from .report import image, judged, paragraphs, settings_line, table

QUOTA_CPUS = 1.0
PERIOD_US = 100_000
CASE = "cnn"
SIZED, DEFAULT = "sized to the quota", "TensorFlow's default"
CGROUP_ROOT = Path("/sys/fs/cgroup")


class Cgroup:
    """A CPU cgroup of this figure's own (v2, or v1's cpu controller), removed by close()."""

    def __init__(self, root: Path = CGROUP_ROOT):
        name = f"tfmw-bench-{uuid.uuid4().hex[:8]}"
        if (root / "cgroup.controllers").is_file():  # cgroup v2: the unified hierarchy
            if "cpu" not in (root / "cgroup.subtree_control").read_text().split():
                raise BenchError(f"figure 9: cgroup v2 at {root} does not delegate the cpu controller to children")
            self.v2, self.path = True, root / name
        else:
            cpu = next((root / n for n in ("cpu", "cpu,cpuacct") if (root / n / "cpu.cfs_quota_us").is_file()), None)
            if cpu is None:
                raise BenchError(f"figure 9: no cgroup cpu controller under {root}")
            self.v2, self.path = False, cpu / name
        try:
            self.path.mkdir()
        except OSError as err:
            raise BenchError(f"figure 9: cannot create a cgroup ({err.strerror}: {self.path}); run as root") from None

    def limit(self, cpus: float) -> None:
        quota = int(cpus * PERIOD_US)
        if self.v2:
            (self.path / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        else:
            (self.path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (self.path / "cpu.cfs_quota_us").write_text(str(quota))

    def enter(self) -> None:
        """In the child before exec: move this process into the cgroup."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def throttling(self) -> tuple[int, int]:
        """(nr_periods, nr_throttled) so far."""
        fields = dict(line.split() for line in (self.path / "cpu.stat").read_text().splitlines() if line.strip())
        return int(fields["nr_periods"]), int(fields["nr_throttled"])

    def close(self) -> None:
        try:
            self.path.rmdir()
        except OSError:
            pass


def variant_env(variant: str, quota: float, affinity: int) -> dict:
    """The thread variables of a variant (pure): the trainer's plan for the quota, or none."""
    if variant == DEFAULT:
        return {}
    chosen = threads.plan({}, quota, affinity)
    return {"TF_NUM_INTRAOP_THREADS": str(chosen.intra_op), "TF_NUM_INTEROP_THREADS": str(chosen.inter_op)}


@dataclass
class Sample:
    variant: str
    step_seconds: float
    periods: int
    throttled: int

    @property
    def throttled_share(self) -> float:
        return self.throttled / self.periods if self.periods else 0.0


@dataclass
class Result:
    quota: float
    affinity: int
    envs: dict
    samples: list = field(default_factory=list)

    def of(self, variant: str) -> list[Sample]:
        return [s for s in self.samples if s.variant == variant]


def one_run(group: Cgroup, variant: str, env_extra: dict, spec: str, timeout: float = 600) -> Sample:
    before = group.throttling()
    env = base_env(env_extra, one_thread=False)
    for name in threads.USER_VARIABLES + ("OMP_NUM_THREADS",):
        if name not in env_extra:
            env.pop(name, None)
    proc = subprocess.run(
        [PY, "-m", "tfmw.bench.mwms_step", spec],
        cwd=REPO,
        env=env,
        preexec_fn=group.enter,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    after = group.throttling()
    if proc.returncode != 0:
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
        raise BenchError(f"figure 9: {variant}: exit {proc.returncode}: {tail}")
    case = bench_cases(proc.stdout)[CASE]
    return Sample(variant, case["step_seconds"], after[0] - before[0], after[1] - before[1])


def measure(quick: bool, log=print) -> Result:
    rounds = 2 if quick else 5
    cases = [c for c in plan(quick) if c.id == CASE]
    spec = json.dumps([cases[0].spec()])
    affinity = len(os.sched_getaffinity(0))
    result = Result(QUOTA_CPUS, affinity, {v: variant_env(v, QUOTA_CPUS, affinity) for v in (SIZED, DEFAULT)})
    group = Cgroup()
    try:
        group.limit(QUOTA_CPUS)
        for r in range(rounds):
            order = (SIZED, DEFAULT) if r % 2 == 0 else (DEFAULT, SIZED)
            for variant in order:
                sample = one_run(group, variant, result.envs[variant], spec)
                result.samples.append(sample)
                log(
                    f"  figure 9: round {r + 1}/{rounds}, {variant}: {sample.step_seconds * 1e3:.1f} ms/step, "
                    f"throttled {sample.throttled}/{sample.periods} periods"
                )
    finally:
        group.close()
    return result


def ratios(result: Result) -> list[float]:
    """Per round, the sized step's time over TensorFlow's default's (pure; < 1: sizing is faster)."""
    return stats.paired_ratios([s.step_seconds for s in result.of(SIZED)], [s.step_seconds for s in result.of(DEFAULT)])


HEADERS = ["threads", "TF_NUM_INTRAOP/INTEROP_THREADS", "ms/step (median)", "examples/s", "throttled periods"]


def table_rows(result: Result) -> list[list]:
    rows = []
    for variant in (SIZED, DEFAULT):
        samples = result.of(variant)
        step = stats.median([s.step_seconds for s in samples])
        env = result.envs[variant]
        rows.append(
            [
                variant,
                f"{env['TF_NUM_INTRAOP_THREADS']}/{env['TF_NUM_INTEROP_THREADS']}" if env else "unset",
                round(step * 1e3, 1),
                round(BATCH / step),
                f"{stats.median([s.throttled_share for s in samples]):.0%}",
            ]
        )
    return rows


def plot(result: Result, path: Path, subtitle: str) -> None:
    fig, ax = plots.subplots(figsize=(7, 2.4))
    for k, variant in enumerate((SIZED, DEFAULT)):
        steps = [BATCH / s.step_seconds for s in result.of(variant)]
        ax.scatter(steps, [k] * len(steps), color=f"C{k}")
    ax.set_yticks([0, 1], [SIZED, DEFAULT], fontsize=8)
    ax.set_xlabel(f"examples/s, one worker in a {result.quota:g}-CPU quota on {result.affinity} cores", fontsize=9)
    fig.suptitle(f"Figure 9: threads under a CPU limit\n{subtitle}", fontsize=10)
    plots.save(fig, path)


# ---------------------------------------------------------------- the figure

TITLE = "Figure 9: TensorFlow's threads under a CPU limit"


def run_figure(bench: BenchRun) -> str:
    return measured(bench, sys.modules[__name__], "Figure 9: threads under a CPU limit", "fig9_threads.png", section)


def section(result, table_rows, headers, load: str) -> str:
    """Figure 9's section: the trainer's thread sizing against TensorFlow's own under a CPU quota."""
    per_round = ratios(result)
    ratio = stats.median(per_round)
    low, high = stats.spread(per_round)
    rounds = len(per_round)
    sized_intra = result.envs[SIZED]["TF_NUM_INTRAOP_THREADS"]
    return paragraphs(
        "## Figure 9: TensorFlow's threads under a CPU limit",
        image("fig9_threads.png", "examples/s per run, threads sized to the quota vs TensorFlow's default"),
        settings_line(
            f"a cgroup of the figure's own with a CFS quota of {result.quota:g} CPU (what "
            f"`workers.resources.limits.cpu: {result.quota:g}` gives a container) on a machine whose process "
            f"may run on {result.affinity} cores. In it, one process at a time runs the bench's step of the "
            f"default model (`{CASE}`: the trainer's step function, `scripts/tfmw/bench/mwms_step.py`, one "
            "worker, data in memory), alternately with the thread pools the trainer picks for that quota "
            "(`entrypoint/training/threads.py`, passed as TensorFlow's own variables) and with neither "
            "variable set (TensorFlow sizes its pools to the cores). Throttled periods: the cgroup's "
            f"`cpu.stat` over each run (the process's whole life, imports "
            f"included), nr_throttled of nr_periods. {rounds} round(s), the order alternating; "
            "medians, the ratio paired per round.",
            load,
        ),
        table(headers, table_rows),
        f"**Reading it.** With the pools sized to the quota the step took {ratio:.2f}x TensorFlow's default's "
        f"time, {1 / ratio:.2f}x the steps per second ({judged(low, high, ratio)}). Here the sized intra-op "
        f"pool has {sized_intra} thread(s) against TensorFlow's {result.affinity} (one per core); on a GPU node "
        "TensorFlow's default is one thread per core of the node (64-224) inside a quota of a few CPUs.",
    )
