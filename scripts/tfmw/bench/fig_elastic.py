"""Figure 14: a worker lost with no room, elastic training off against on. Real 4-worker local
runs of values/local.yaml's model (the launcher, the trainer, make local's runner), worker 3's
pod killed at step 30 and held (not started again) for OUTAGE_SECONDS, then released; off and on
back to back in each round (scripts/tfmw/faults/elastic.py, what the e2e test runs too).

Measured per run: worker-seconds idle from the loss to the end (the three workers not held,
every gap of 2 s or more between their steps), the chief's steps per hour through the outage,
the time from the loss to the first step after it (shrink, or the wait) and from the release to
the returning worker's first step (grow), and the final loss.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from tfmw.faults.elastic import WORKERS, ElasticRun, local_elastic_run

from . import plots
from .figure import BenchRun
from .machine import load_average
from .report import image, paragraphs, settings_line, table

TITLE = "Figure 14: a worker lost with no room, elastic training off and on"
OUTAGE_SECONDS = 30.0
STEPS = 3000
GRACE_SECONDS = 10
ROUNDS = 2
HEADERS = [
    "round",
    "elastic",
    "idle worker-s",
    "steps/h in the outage",
    "loss -> first step (s)",
    "release -> its first step (s)",
    "final loss",
    "ok",
]


def measure(quick: bool, log=print) -> list[ElasticRun]:
    runs = []
    with tempfile.TemporaryDirectory(prefix="tfmw-bench-elastic-") as tmp:
        for round_ in range(1 if quick else ROUNDS):
            for elastic in (False, True):
                log(f"figure 14: round {round_ + 1}, elastic {'on' if elastic else 'off'}")
                run = local_elastic_run(
                    Path(tmp), elastic=elastic, steps=STEPS, outage_seconds=OUTAGE_SECONDS, grace_seconds=GRACE_SECONDS
                )
                runs.append(run)
    return runs


def _cell(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def table_rows(runs: list[ElasticRun]) -> list[list]:
    rows = []
    for i, run in enumerate(runs):
        rows.append(
            [
                i // 2 + 1,
                "on" if run.elastic else "off",
                f"{run.idle_worker_seconds:.0f}",
                f"{run.steps_per_hour_in_outage:.0f}",
                _cell(run.shrink_seconds, ".1f"),
                _cell(run.grow_seconds, ".1f"),
                _cell(run.final_loss, ".4f"),
                "yes" if run.ok else f"no: {run.reason}",
            ]
        )
    return rows


def verdict(runs: list[ElasticRun]) -> str:
    """The reading, from the paired rounds (pure)."""
    pairs = [(runs[i], runs[i + 1]) for i in range(0, len(runs) - 1, 2)]
    if not pairs or not all(off.ok and on.ok for off, on in pairs):
        return "Not every run succeeded: no verdict from this run (the table says which)."
    idle = [on.idle_worker_seconds / off.idle_worker_seconds for off, on in pairs if off.idle_worker_seconds]
    losses = [abs(on.final_loss - off.final_loss) for off, on in pairs if on.final_loss is not None and off.final_loss]
    through = [on.steps_per_hour_in_outage for _, on in pairs]
    return (
        f"Elastic on idled **{statistics.median(idle):.2f}x** the worker-seconds of elastic off (median of "
        f"{len(idle)} paired rounds, {min(idle):.2f}-{max(idle):.2f}x), and trained through the outage at a "
        f"median {statistics.median(through):.0f} steps/h where off trained none; the final loss differed by "
        f"at most {max(losses):.4f} (the same examples at every step, summed in another order)."
    )


def plot(runs: list[ElasticRun], path, subtitle: str) -> None:
    """Per round, off beside on: the idle worker-seconds, and the two waits the table times."""
    fig, (idle_ax, wait_ax) = plots.subplots(1, 2, figsize=(9, 3.2))
    rounds = sorted({i // 2 + 1 for i in range(len(runs))})
    for offset, elastic in ((-0.2, False), (0.2, True)):
        mine = [run for run in runs if run.elastic == elastic]
        label = "elastic on" if elastic else "elastic off"
        idle = [run.idle_worker_seconds for run in mine]
        bars = idle_ax.bar([n + offset for n in rounds[: len(idle)]], idle, width=0.4, label=label)
        idle_ax.bar_label(bars, labels=[f"{v:.0f}" for v in idle], fontsize=7)
        shrink = [run.shrink_seconds or 0.0 for run in mine]
        grow = [run.grow_seconds or 0.0 for run in mine]
        wait_ax.bar([n + offset for n in rounds[: len(mine)]], shrink, width=0.4, label=f"{label}: loss -> first step")
        wait_ax.bar(
            [n + offset for n in rounds[: len(mine)]],
            grow,
            width=0.4,
            bottom=shrink,
            alpha=0.5,
            label=f"{label}: release -> its first step",
        )
    for ax in (idle_ax, wait_ax):
        ax.set_xticks(rounds, [f"round {n}" for n in rounds])
        ax.set_ylim(0, ax.get_ylim()[1] * 1.7)  # room above the bars for the legend
        ax.legend(fontsize=6, loc="upper right")
    idle_ax.set_ylabel("idle worker-seconds")
    wait_ax.set_ylabel("seconds")
    fig.suptitle(f"{TITLE}\n{subtitle}", fontsize=10)
    plots.save(fig, path)


def run_figure(bench: BenchRun) -> str:
    load = load_average()
    runs = measure(bench.quick, log=bench.log)
    rows = table_rows(runs)
    bench.show(TITLE, HEADERS, rows)
    plot(runs, bench.plots / "fig14_elastic.png", bench.machine_line)
    settings = settings_line(
        f"{WORKERS} workers of values/local.yaml's model on make local's runner, {STEPS} steps, "
        "3 micro-batches of 8 each, a checkpoint every 10 steps; worker 3's pod killed at step 30 and held for "
        f"{OUTAGE_SECONDS:.0f} s (its node lost, no room), then released; elastic on: "
        f"`training.elastic.minReplicas=2`, `graceSeconds={GRACE_SECONDS}`. Off and on back to back in each "
        "round. Run by `tfmw.bench.fig_elastic.run_figure` (`--only 14`).",
        load,
    )
    return paragraphs(
        f"## {TITLE}",
        settings,
        table(HEADERS, rows),
        image("fig14_elastic.png", "idle worker-seconds and waits, elastic off vs on, per round"),
        verdict(runs),
        "**Reading it.** Off, the three workers that run wait at their step for the lost one: every "
        "second of the outage is three idle workers, and the first step after the loss is the lost "
        "worker's return. On, the group shrinks after the grace (10 s here, 120 s by default) plus one "
        "restart from the last checkpoint, trains at 3 x 4 micro-batches (the same global batch of "
        "4 x 3), and grows back at its next checkpoint once the worker runs again: a second restart. "
        "What remains idle is those two restarts and the grace: about 35 s of three workers here, so "
        "with this 30 s outage (scaled down to fit this machine) elastic training saves only a small part "
        "of the idle worker-seconds; the saving is the outage minus that fixed cost, so on an outage of "
        "hours it is nearly all of it (not measured here).",
    )
