"""Figure 5: input pipeline — examples/s of the trainer's tf.data pipeline (synthetic in memory,
NPZ shards, TFRecord shards) against the training step, in one process (pipeline_worker.py)."""

from __future__ import annotations

import json
import sys

from entrypoint import loglines

from . import plots
from .figure import BenchRun, measured
from .parse import first_payload
from .procs import BenchError, run_workers
from .report import image, paragraphs, settings_line, table

RESULT = "pipeline"  # the worker's `tfmw bench pipeline=<json>` line


def measure(quick: bool, log=print) -> dict:
    opts = {
        "batch": 64,
        "batches": 15 if quick else 30,
        "examples": 4096,
        "shards": 4,
        "model": "cnn",
        # >= 5 rounds: the fed/alone ratio decides whether the input keeps up, and single rounds on
        # this shared machine scatter by several percent
        "rounds": 2 if quick else 5,
    }
    log("  figure 5: input pipeline vs. training step (one process)")
    # One worker, no TF_CONFIG needed: run_workers sets a one-worker TF_CONFIG, which is unused.
    (out,) = run_workers(["tfmw.bench.pipeline_worker", json.dumps(opts)], 1, 600)
    return parse(out)


def result_line(result: dict) -> str:
    """The worker's `tfmw bench pipeline=<json>` line."""
    return loglines.payload_line(loglines.BENCH, RESULT, result)


def parse(output: str) -> dict:
    """The result of the worker's output: its `tfmw bench pipeline=<json>` line."""
    result = first_payload(output, RESULT)
    if result is None:
        raise BenchError("figure 5: the pipeline worker printed no result line")
    return result


TARGET = 0.95  # the step fed by the pipeline at >= 95% of its speed on a batch held in memory

HEADERS = [
    "data source",
    "pipeline alone ex/s",
    "training step alone ex/s",
    "headroom (pipeline / step)",
    "step fed by the pipeline ex/s",
    "fed / alone (median of paired rounds)",
    "fed / alone, min-max",
    f"keeps up (>= {TARGET})",
]


def keeps_up(source: dict) -> bool:
    return source["fed_ratio"] >= TARGET


def table_rows(result: dict) -> list[list]:
    step = result["step_alone"]
    return [
        [
            name,
            s["pipeline"],
            step,
            s["pipeline"] / step,
            s["fed_step"],
            s["fed_ratio"],
            f"{s['fed_ratio_min']:.2f}-{s['fed_ratio_max']:.2f}",
            "yes" if keeps_up(s) else "NO",
        ]
        for name, s in result["sources"].items()
    ]


def plot(result: dict, path, subtitle: str) -> None:
    names = list(result["sources"])
    step = result["step_alone"]
    fig, ax = plots.subplots(figsize=(10, 4.8))
    xs = range(len(names))
    pipe = [result["sources"][n]["pipeline"] for n in names]
    fed = [result["sources"][n]["fed_step"] for n in names]
    ax.bar([x - 0.2 for x in xs], pipe, 0.4, label="tf.data pipeline alone")
    ax.bar([x + 0.2 for x in xs], fed, 0.4, label="training step fed by the pipeline")
    ax.axhline(step, color="black", ls="--", lw=1, label=f"training step alone ({step:,.0f} ex/s)")
    for x, p in zip(xs, pipe, strict=True):
        ax.annotate(f"{p / step:.0f}x the step", (x - 0.2, p), ha="center", va="bottom", fontsize=8)
    for x, n, f in zip(xs, names, fed, strict=True):
        ratio = result["sources"][n]["fed_ratio"]
        ax.annotate(f"{ratio:.2f} of alone", (x + 0.2, f), ha="center", va="bottom", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylim(min(min(fed), step) / 10, max(pipe) * 30)  # room for the legend above the bars
    ax.set_xticks(list(xs))
    ax.set_xticklabels(names)
    ax.set_ylabel("examples per second (log)")
    ax.set_title(
        f"Figure 5: input pipeline vs. training step ({result['model']} model, batch {result['batch']})\n{subtitle}",
        fontsize=10,
    )
    ax.legend(fontsize=8, loc="upper right")
    plots.save(fig, path)


# ---------------------------------------------------------------- the figure

TITLE = "Figure 5: input pipeline"


def run_figure(bench: BenchRun) -> str:
    return measured(bench, sys.modules[__name__], TITLE, "fig5_pipeline.png", section)


def verdict(result: dict) -> str:
    """Whether the input keeps up, in words (pure)."""
    rounds = result.get("rounds", 1)
    sources = result["sources"]
    step = result["step_alone"]
    met = [n for n, s in sources.items() if keeps_up(s)]
    missed = [n for n, s in sources.items() if not keeps_up(s)]
    ratios = ", ".join(
        f"{n} {s['fed_ratio']:.2f} ({s['fed_ratio_min']:.2f}-{s['fed_ratio_max']:.2f})" for n, s in sources.items()
    )
    head = (
        f"**Target met:** the input keeps up with the training step on every source: fed by the pipeline, "
        f"the step runs at >= {TARGET:.0%} of its speed on a batch held in memory"
        if not missed
        else f"**Target missed** (fed / alone >= {TARGET} on every source) on {', '.join(missed)}"
        + (f"; met on {', '.join(met)}" if met else "")
    )
    lines = [f"{head}. Median of {rounds} paired rounds (min-max): {ratios}."]
    for n in missed:
        s = sources[n]
        if s["pipeline"] >= 2 * step:
            lines.append(
                f"{n} alone delivers {s['pipeline'] / step:.0f}x what the step consumes, so it is not too slow: "
                "the shortfall is its threads taking CPU time from the step on the 2 shared cores."
            )
        else:
            lines.append(f"{n} alone delivers {s['pipeline'] / step:.1f}x what the step consumes: too slow to feed it.")
    low = [n for n, s in sources.items() if keeps_up(s) and s["fed_ratio_min"] < TARGET]
    if low:
        lines.append(
            f"Single rounds of {', '.join(low)} fell below {TARGET}: the machine is shared, so single rounds scatter."
        )
    return " ".join(lines)


def section(result: dict, table_rows, headers, load: str) -> str:
    """Figure 5's section of docs/benchmarks.md (pure)."""
    step = result["step_alone"]
    rounds = result.get("rounds", 1)
    slowest = min(result["sources"].items(), key=lambda kv: kv[1]["pipeline"])
    return paragraphs(
        "## Figure 5: input pipeline vs. training step",
        image("fig5_pipeline.png", "examples per second, pipeline alone vs training step"),
        settings_line(
            f"{result['examples']:,} synthetic examples of shape 28x28x1 (the trainer's default), written as 4 NPZ "
            "and 4 TFRecord shards by the trainer's own writer "
            "(`entrypoint.training.prepare_digits.write_shards`), "
            "read by the trainer's own `entrypoint.training.data.build_input` with its defaults (each epoch in "
            "its own seeded order, batch, prefetch AUTOTUNE; TFRecord: the 4 files read at once "
            "(`data.readParallelism`), a batch of records parsed at once), and TFRecord again with "
            f"`data.cache: true`; the `{result['model']}` model, batch {result['batch']}, Adam, one device; one "
            "intra/inter-op thread (tf.data's own thread pool is not limited by these). "
            f"{rounds} round(s); in each, per source, the step alone on a batch held in memory, the pipeline "
            "alone, the step fed by the pipeline, the step alone again; a round's ratio is the fed step over "
            "the mean of its two runs alone (paired), the table shows the median and the min-max of the "
            "rounds' ratios, the other columns medians.",
            load,
        ),
        table(headers, table_rows),
        verdict(result),
        f"**Reading it.** The slowest source, {slowest[0]}, delivers {slowest[1]['pipeline']:,.0f} examples/s "
        f"alone: {slowest[1]['pipeline'] / step:.0f}x what the training step consumes ({step:,.0f} examples/s). "
        "A ratio at or above 1 is the step's own speed within this machine's noise; the pipeline's threads "
        "compete with the step for the same 2 cores. On a GPU the step is much faster: compare its examples/s "
        "with the pipeline column (NPZ shards and cached TFRecords are held in memory once, streamed TFRecords "
        "are read and parsed on every pass).",
    )
