"""Figure 3: recovery — time from a fault to training resumed, and steps lost.

Measured by the fault harness (`scripts/tfmw/faults/`), called here: every fault at the chart's
defaults (quick mode: one), then the faults a setting decides with that setting changed
(VARIANTS: the warm standby off, static hang detection, both), and a plot of fault → resumed
per fault and configuration. Every number is a field of the harness's FaultResults.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from entrypoint import loglines
from tfmw.chart.helmkit import ToolError
from tfmw.faults import analysis as fault_analysis
from tfmw.faults import local as fault_local
from tfmw.faults import tables as fault_tables
from tfmw.localrun.podspec import LocalRunError

from . import fig_goodput, plots, stats
from .figure import BenchRun
from .procs import ONE_THREAD, PY, REPO, BenchError, base_env
from .report import image, table

QUICK_SCENARIO = "kill-worker"
# The warm standby's on/off value (entrypoint/standby.py, charts/tf-multiworker/values.yaml).
STANDBY_VALUE = "training.warmStandby"
# The previous harness default: a hand-tuned static watchdog (the chart's static 600 s would
# make a hang cost ten minutes).
STATIC_SECONDS = 20
STATIC = "training.hangDetection=static"
STANDBY_OFF = f"{STANDBY_VALUE}=false"


@dataclass(frozen=True)
class Config:
    """One configuration of the harness: its faults (empty: every local one), --set items and
    watchdog bound (None: the chart's)."""

    label: str
    scenarios: tuple[str, ...] = ()
    sets: tuple[str, ...] = ()
    hang_timeout: int | None = None

    def command(self) -> str:
        """The same runs from a shell (pure)."""
        args = [word for s in self.scenarios for word in ("--scenario", s)]
        args += [word for s in self.sets for word in ("--set", s)]
        args += [] if self.hang_timeout is None else ["--hang-timeout", str(self.hang_timeout)]
        return " ".join(["python -m tfmw.faults", *args])


DEFAULTS = Config("defaults")
# Figure 3's variants, each one setting away from the chart's defaults (the main table), for
# the faults it decides: a kill is seen at once (the closed connection), so detection decides
# only a hang and a partition; the standby decides every restart.
VARIANTS = (
    Config("warm standby off", ("kill-worker", "hang-worker", "partition-worker"), (STANDBY_OFF,)),
    Config(f"static detection ({STATIC_SECONDS} s)", ("hang-worker", "partition-worker"), (STATIC,), STATIC_SECONDS),
    Config(
        f"both off (static {STATIC_SECONDS} s, no standby)",
        ("hang-worker", "partition-worker"),
        (STATIC, STANDBY_OFF),
        STATIC_SECONDS,
    ),
)


# kill-worker at the defaults, run this many times in all (the defaults' own run included) for
# its spread; its target is a resume within RESUME_TARGET_SECONDS.
KILL_ROUNDS = 3
RESUME_TARGET_SECONDS = 4.0
KILL_REPEAT = Config("defaults, kill-worker again", (QUICK_SCENARIO,))
# The parts of fault -> resumed that are the chief's own path (recovery_parts); the rest
# (group re-form, restore, first step) waits on the killed worker's new container and TF.
OWN_PARTS = ("detection", "trainer exit", "restart", "process start")


def defaults(quick: bool) -> Config:
    """The main table's configuration: every fault, or one in quick mode."""
    return Config(DEFAULTS.label, (QUICK_SCENARIO,)) if quick else DEFAULTS


@dataclass
class Run:
    config: Config
    results: list[fault_analysis.FaultResult] = field(default_factory=list)

    @property
    def status(self) -> str:
        lost = sum(not r.completed for r in self.results)
        return f"{lost} of {len(self.results)} faults NOT recovered" if lost else "every fault recovered"


def pods_env() -> dict[str, str]:
    """The pods' environment: make local's, one thread per process as in figure 1."""
    return dict(base_env(), **ONE_THREAD)


def run(config: Config, log=print) -> Run:
    """Every fault of `config`, one real 2-worker run each (scripts/tfmw/faults/)."""
    log(f"  figure 3: {config.label}: {config.command()}")
    done = Run(config)
    for scenario in config.scenarios or fault_local.SCENARIOS:
        log(f"  figure 3: {config.label}: {scenario}")
        try:
            done.results.append(
                fault_local.run_scenario(
                    scenario, extra_sets=config.sets, hang_timeout_seconds=config.hang_timeout, env=pods_env()
                )
            )
        except (ToolError, LocalRunError) as err:
            raise BenchError(f"figure 3: {scenario}: {err}") from None
    log(f"\nFigure 3, {config.label}: {done.status}\n" + "\n".join(fault_tables.table(done.results)) + "\n")
    return done


def summary(runs: list[Run]) -> tuple[list[str], list[list]]:
    """One row per fault, one column per configuration (the defaults first): its fault →
    resumed seconds; None where that configuration did not run it, NaN where it did not
    measure it (pure)."""
    cells: dict[str, dict[str, float]] = {}
    for done in runs:
        for result in done.results:
            cells.setdefault(result.scenario, {})[done.config.label] = result.seconds_to_resume
    labels = [done.config.label for done in runs]
    return (
        ["fault", *(f"{label}: resumed (s)" for label in labels)],
        [[fault, *(by_label.get(label) for label in labels)] for fault, by_label in cells.items()],
    )


@dataclass(frozen=True)
class Spread:
    """kill-worker's fault -> resumed over its runs at the defaults: median and (min, max), the
    parts' medians, and the chief's cold start (its first start's imports, trace, first step)."""

    runs: int
    resumed: float
    low: float
    high: float
    parts: dict
    cold_start: float

    @property
    def met(self) -> bool:
        return self.high <= RESUME_TARGET_SECONDS

    @property
    def own(self) -> float:
        """The median parts on the chief's own path (not waiting for the killed worker)."""
        return sum(self.parts.get(p, 0.0) for p in OWN_PARTS)


def kill_worker_spread(runs: list[Run]) -> Spread | None:
    """Every measured kill-worker result of `runs` (pure); None without one."""
    results = [
        r
        for done in runs
        for r in done.results
        if r.scenario == QUICK_SCENARIO and r.completed and not math.isnan(r.seconds_to_resume)
    ]
    if not results:
        return None
    resumed = [r.seconds_to_resume for r in results]
    names = {p for r in results for p in r.parts}
    parts = {p: stats.median([r.parts.get(p, 0.0) for r in results]) for p in names}
    colds = [r.seconds_cold_start for r in results if not math.isnan(r.seconds_cold_start)]
    return Spread(
        len(results),
        stats.median(resumed),
        *stats.spread(resumed),
        parts,
        stats.median(colds) if colds else math.nan,
    )


def _measured(value) -> bool:
    return value is not None and not math.isnan(value)


def plot(headers: list[str], rows: list[list], path, subtitle: str) -> bool:
    """Grouped bars: per fault (row), one bar per configuration column with a number.
    False: nothing to plot."""
    columns = [j for j in range(1, len(headers)) if any(_measured(r[j]) for r in rows)]
    if not columns:
        return False
    width = 0.8 / len(columns)
    fig, ax = plots.subplots(figsize=(9, 1.6 + 0.9 * len(rows)))
    top = max(r[j] for r in rows for j in columns if _measured(r[j]))
    for k, j in enumerate(columns):
        ys = [i + k * width for i in range(len(rows))]
        bars = ax.barh(
            ys,
            [r[j] if _measured(r[j]) else 0 for r in rows],
            height=width,
            label=headers[j].replace(": resumed (s)", ""),
        )
        ax.bar_label(bars, labels=[f"{r[j]:.1f}" if _measured(r[j]) else "" for r in rows], fontsize=7, padding=2)
    ax.set_yticks([i + width * (len(columns) - 1) / 2 for i in range(len(rows))], [r[0] for r in rows], fontsize=8)
    ax.set_xlim(0, top * 1.25 or 1)
    ax.invert_yaxis()
    ax.set_xlabel("fault → training resumed (s)", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"Figure 3: recovery after a fault (fault-tolerance harness)\n{subtitle}", fontsize=10)
    plots.save(fig, path)
    return True


CHECKPOINT_RESULT = "checkpoint"  # checkpoint_save.py's `tfmw bench checkpoint=<json>` line, one per model


def checkpoint_line(result: dict) -> str:
    """checkpoint_save.py's line for one model's saves."""
    return loglines.payload_line(loglines.BENCH, CHECKPOINT_RESULT, result)


CHECKPOINT_HEADERS = [
    "model",
    "checkpoint MB",
    "sync save (s)",
    "async: call returns (s)",
    "async: files written (s)",
    "stall sync / async",
]


def checkpoint_saves(log=print, timeout: float = 600) -> list[list]:
    """The checkpoint table (scripts/tfmw/bench/checkpoint_save.py, one process, one thread as the
    faulted pods): a row per model."""
    import subprocess

    proc = subprocess.run(
        [PY, "-m", "tfmw.bench.checkpoint_save"],
        cwd=REPO,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    rows = [
        [
            r["model"],
            round(r["bytes"] / 1e6, 1),
            r["sync_s"],
            r["async_return_s"],
            r["async_written_s"],
            f"{r['sync_s'] / r['async_return_s']:.0f}x" if r["async_return_s"] > 0 else "-",
        ]
        for r in loglines.payloads(proc.stdout.splitlines(), loglines.BENCH, CHECKPOINT_RESULT)
    ]
    if proc.returncode != 0 or not rows:
        raise BenchError(f"figure 3: checkpoint saves: exit {proc.returncode}: {(proc.stdout + proc.stderr)[-300:]}")
    log("  figure 3: checkpoint saves: " + "; ".join(f"{r[0]} sync {r[2]:.3f}s async {r[3]:.3f}s" for r in rows))
    return rows


# ---------------------------------------------------------------- the figure

TITLE = "Figure 3: recovery after a fault"


def run_figure(bench: BenchRun) -> str:
    runs = [run(defaults(bench.quick), log=bench.log)]
    repeats = []
    if not bench.quick:
        repeats = [run(KILL_REPEAT, log=bench.log) for _ in range(KILL_ROUNDS - 1)]
        runs += [run(config, log=bench.log) for config in VARIANTS]
    resumed = summary(runs)
    spread = kill_worker_spread([runs[0], *repeats])
    plotted = plot(*resumed, bench.plots / "fig3_recovery.png", bench.machine_line)
    saves = checkpoint_saves(log=bench.log)
    bench.show("Figure 3: checkpoint saves", CHECKPOINT_HEADERS, saves)
    goodput = fig_goodput.run_part(bench)
    return section(runs[0], plotted, runs[1:], resumed, bench.quick, saves, goodput, spread)


def section(
    defaults,
    plotted: bool,
    variants: list,
    summary: tuple[list, list],
    quick: bool,
    saves: list | None = None,
    goodput: list | None = None,
    spread=None,
) -> str:
    """Figure 3: the harness's table at the chart's defaults, then the same faults with one
    setting changed (`variants`: fig_recovery.Run each) and the summary of fault → resumed per
    configuration (fig_recovery.summary)."""

    lines = ["## Figure 3: recovery after a fault", ""]
    if plotted:
        lines += [image("fig3_recovery.png", "fault to training resumed, per configuration"), ""]
    lines += [
        f"*Command:* `{defaults.config.command()}` — **{defaults.status}**.",
        "",
        "Method (the harness, `scripts/tfmw/faults/`): each row is a real 2-worker MWMS run of the rendered "
        "chart by `make local`'s runner with the chart's defaults (`values/local.yaml`; nothing about detection or "
        "restarts is tuned: `training.hangTimeoutSeconds` 600 with `training.hangDetection: adaptive`, TensorFlow's "
        "coordination heartbeat, the warm standby on for the built-in trainer); the fault is injected mid-training "
        "(see the harness's docstring for what each fault is); 'fault → resumed' is the time from the fault to the "
        "chief's first progress line after its restart, 'steps lost' the steps trained before the fault minus the "
        "step the group resumed from (at most one checkpoint interval)."
        + (" Quick mode runs one fault." if quick else ""),
        "",
        *fault_tables.table(defaults.results),
        "",
        "**Where fault → resumed goes**, at the chief's milestones (`scripts/tfmw/faults/analysis.py` recovery_parts): "
        "detection (the fault to the first line that shows it), trainer exit (to the chief's launcher seeing its "
        "trainer gone), restart (back-off, peer wait; a killed chief's pod restart), process start (the new "
        "trainer's imports: none with the warm standby), group re-form (until every worker joined the coordination "
        "service: the killed worker's own cold start sits here), restore (model build, checkpoint restore), first "
        "step (tracing). *cold start*: the chief's first start in the same run, `starting training (attempt 1)` to "
        "its first step; *goodput*: the chief's time account for the whole run (docs/contracts.md).",
        "",
        *fault_tables.parts_table(defaults.results),
        "",
        *kill_worker_lines(spread),
    ]
    if variants:
        lines += [
            "**With and without adaptive detection and the warm standby.** The faults each setting decides, "
            "re-run with that one setting changed from the defaults: `training.warmStandby=false` (every restart "
            "imports TensorFlow again), `training.hangDetection=static` with the 20 s watchdog the harness used "
            "to set by hand (static at the chart's 600 s, a hang would cost ten minutes), and both (the previous "
            "defaults). Fault → resumed, seconds ('-': not run in that configuration, or not measured; the "
            "partition lasts 15 s, a floor for its resume time):",
            "",
            table(summary[0], [[fault, *map(_seconds, cells)] for fault, *cells in summary[1]]),
            "",
        ]
        for variant in variants:
            lines += [
                f"{variant.config.label}: `{variant.config.command()}` — **{variant.status}**:",
                "",
                *fault_tables.table(variant.results),
                "",
            ]
    if saves:
        lines += [
            "**Checkpoint saves: synchronous or async.** How long a save stalls the step loop "
            "(`python -m tfmw.bench.checkpoint_save`: the trainer's model builder and optimizer state, "
            "medians of 5 saves after a warm-up, one thread): the trainer's `tf.train.Checkpoint.write`, against "
            "TensorFlow's async checkpoint (`CheckpointOptions(enable_async=True)`), whose call returns once "
            "the values are copied while a background thread writes the files. Not adopted (docs/failure-model.md, "
            '"Checkpoints"): the trainer publishes a checkpoint (the state-file rename every restore reads) only '
            "once its files are complete, so an async save must be waited for before that rename; what async "
            "can save is the write time of the last column minus the copy, per checkpoint, and only by publishing "
            "from a background thread serialized with the next boundary vote and the SIGTERM checkpoint.",
            "",
            table(CHECKPOINT_HEADERS, saves),
            "",
        ]
    if goodput:
        lines += fig_goodput.section_lines(goodput, quick)
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    """A time as the harness's table prints it (0.1 s); '-' when not run or not measured."""
    return "-" if value is None or value != value else f"{value:.1f}"


def kill_worker_lines(spread) -> list[str]:
    """Figure 3's kill-worker over its runs against its target, and what is ours of it (pure)."""
    if spread is None:
        return []
    verdict = "met" if spread.met else "MISSED"
    reform = spread.parts.get("group re-form", math.nan)
    first = spread.parts.get("first step", math.nan)
    restore = spread.parts.get("restore", math.nan)
    return [
        f"**kill-worker over {spread.runs} runs at the defaults**: fault → resumed median "
        f"{spread.resumed:.1f} s ({spread.low:.1f}–{spread.high:.1f}); target ≤ "
        f"{RESUME_TARGET_SECONDS:.0f} s in every run: **{verdict}**. Medians of the parts: "
        + ", ".join(
            f"{name} {spread.parts[name]:.1f} s" for name in fault_analysis.RECOVERY_PARTS if name in spread.parts
        )
        + f". The chief's own path (detection, trainer exit, restart, process start: the warm standby "
        f"takes over) is {spread.own:.1f} s. The rest waits on the killed worker: its whole pod was "
        f"SIGKILLed, so the group re-forms ({reform:.1f} s) only once the kubelet has restarted its container "
        "(make local's runner waits 1 s before a restart) and its new "
        "launcher has imported Python, TensorFlow and the trainer (no standby survives its container); then both "
        f"restore ({restore:.1f} s) and trace the step (first step {first:.1f} s). The chief's cold start in "
        f"the same runs, imports to first step, is {spread.cold_start:.1f} s: the floor of a new container, "
        "so the restart wait plus this cold start put a new container's resume above the target on "
        "this machine.",
        "",
    ]
