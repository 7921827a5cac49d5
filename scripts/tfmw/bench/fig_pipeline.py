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
        "rounds": 1 if quick else 2,
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


HEADERS = [
    "data source",
    "pipeline alone ex/s",
    "training step alone ex/s",
    "headroom (pipeline / step)",
    "step fed by the pipeline ex/s",
    "fed / step alone (paired)",
]


def table_rows(result: dict) -> list[list]:
    step = result["step_alone"]
    return [
        [name, s["pipeline"], step, s["pipeline"] / step, s["fed_step"], s["fed_ratio"]]
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
    ax.set_yscale("log")
    ax.set_ylim(min(min(fed), step) / 10, max(pipe) * 3)
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


def section(result: dict, table_rows, headers, load: str) -> str:
    """Figure 5's section of docs/benchmarks.md (pure)."""
    step = result["step_alone"]
    slowest = min(result["sources"].items(), key=lambda kv: kv[1]["pipeline"])
    worst_fed = min(result["sources"].items(), key=lambda kv: kv[1]["fed_ratio"])
    return paragraphs(
        "## Figure 5: input pipeline vs. training step",
        image("fig5_pipeline.png", "examples per second, pipeline alone vs training step"),
        settings_line(
            f"{result['examples']:,} synthetic examples of shape 28x28x1 (the trainer's default), written as 4 NPZ "
            "and 4 TFRecord shards by the trainer's own writer "
            "(`entrypoint.training.prepare_digits.write_shards`), "
            "read by the trainer's own `entrypoint.training.data.build_input` (each epoch in its own seeded order, "
            f"batch, prefetch AUTOTUNE); {result.get('rounds', 1)} round(s), medians; the `{result['model']}` "
            f"model, batch {result['batch']}, Adam, one device; one "
            "intra/inter-op thread (tf.data's own thread pool is not limited by these).",
            load,
        ),
        table(headers, table_rows),
        f"**Reading it.** The slowest source, {slowest[0]}, delivers {slowest[1]['pipeline']:,.0f} examples/s: "
        f"{slowest[1]['pipeline'] / step:.0f}x what the training step consumes ({step:,.0f} examples/s). Fed by "
        f"the pipeline, the step runs at {worst_fed[1]['fed_ratio']:.0%} or more of its speed on a batch "
        f"held in memory (median of {result.get('rounds', 1)} paired round(s); the pipeline's own threads compete "
        "with the step for the same 2 cores, and the machine is shared, so this ratio is noisy). On a GPU "
        "the step is much faster: "
        "compare its examples/s with the pipeline column "
        f"({slowest[0]} is the slowest path here; NPZ shards are loaded into memory once, TFRecords are parsed "
        "on every pass).",
    )
