"""Two lanes for one run of the suite (a pytest plugin: tests/conftest.py loads it).

The shared cluster's tests spend most of their time waiting on Kubernetes (a pod's start, a
node's grace, a rollout): the two cores idle. So once the shared cluster is up, a second pytest
process runs, beside it, what needs neither a quiet machine nor that cluster:

    main lane  this process: the tests that train with real TensorFlow on this machine first
               (their timing wants the cores to themselves), then the shared cluster's tests
    side lane  a second process, started when the shared cluster is up: the modules with a
               cluster of their own (`own_cluster`: their nodes are not the shared cluster's,
               and what they do to them reaches no other test), then the fast tests and the
               slow ones marked `beside` (real training, but nothing timed: a busy machine
               only slows them)

The side lane hands every test report back (pytest's own report serialization, as pytest-xdist
does), and the main lane replays them at its end: one summary, one count, one JUnit file, one
`--durations` list, one last-failed cache, as if one process had run everything. A test handed
over that never reported back is a failure, never a silent pass. The side lane's own output is
kept in a file, named at the end, and printed when it did not end as a run does.

Nothing moves when the run has no shared-cluster test (`make test-fast`, one file, a non-root
machine where the cluster tests skip at once): the lanes exist to fill the cluster's waits.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest
from testorder import run_order

# Set in the side lane's environment: the file listing its tests, one node id a line; its
# reports go to the file beside it (reports_file), one JSON line each.
SIDE_LANE_ENV = "TFMW_SIDE_LANE"
SIDE_LANE_PARENT_ENV = "TFMW_SIDE_LANE_PARENT"  # the main lane's pid: the side lane ends with it
SIDE_LANE_TIMEOUT_SECONDS = 3600.0


def in_side_lane(markers: set[str]) -> bool:
    """Whether a test runs in the side lane (pure): one on a cluster of its own, a fast one, or a
    slow one marked `beside` (it needs not the machine to itself); never one on the shared
    cluster, even one not marked slow."""
    if "own_cluster" in markers:
        return True
    return "cluster" not in markers and ("slow" not in markers or "beside" in markers)


def side_lane_order(markers: set[str]) -> tuple:
    """The side lane's order (pure): its own cluster first, so that cluster is up, and stays up,
    while the shared cluster's first tests (those that start clusters of their own to take them
    down) run; then the fast tests, in the suite's order."""
    return ("own_cluster" not in markers, run_order(markers))


def split(items: Sequence[tuple[str, set[str]]]) -> list[str]:
    """The node ids of `items` (node id, markers) that go to the side lane, in its order; none
    unless the run has a test on the shared cluster (the cluster's waits are what it fills)."""
    shared = any("cluster" in markers and "own_cluster" not in markers for _, markers in items)
    if not shared:
        return []
    side = [(nodeid, markers) for nodeid, markers in items if in_side_lane(markers)]
    return [nodeid for nodeid, markers in sorted(side, key=lambda item: side_lane_order(item[1]))]


def test_files(nodeids: Iterable[str]) -> list[str]:
    """The files of `nodeids`, each once, in their first test's order (pure): what the side lane
    collects, and nothing more."""
    return list(dict.fromkeys(nodeid.split("::", 1)[0] for nodeid in nodeids))


def passed_options(option, overrides: Iterable[str], plugins: Iterable[str], warnings: Iterable[str]) -> list[str]:
    """The main lane's options the side lane runs with too (pure): durations, verbosity, how
    many failures stop it (-x), `-p` plugins, `-W` filters and `-o` overrides. `option` is
    pytest's config.option."""
    args: list[str] = []
    if getattr(option, "durations", None) is not None:
        args.append(f"--durations={option.durations}")
    verbose = getattr(option, "verbose", 0) or 0
    if verbose:
        args.append("-" + ("v" if verbose > 0 else "q") * abs(verbose))
    if getattr(option, "maxfail", 0):
        args.append(f"--maxfail={option.maxfail}")  # -x is --maxfail=1
    for plugin in plugins:
        args += ["-p", plugin]
    for warning in warnings:
        args += ["-W", warning]
    for override in overrides:
        args += ["-o", override]
    return args


def reports_file(nodeids_file: str | os.PathLike) -> Path:
    return Path(nodeids_file).with_suffix(".reports.jsonl")


def missing(handed: Sequence[str], reported: Iterable[str]) -> list[str]:
    """The tests handed to the side lane that it never reported (pure), in the order handed."""
    seen = set(reported)
    return [nodeid for nodeid in handed if nodeid not in seen]


class SideLane:
    """The side lane's process: started once, its output kept in a file, waited for at the end."""

    def __init__(self, config, nodeids: list[str]):
        self.config, self.nodeids = config, nodeids
        self.folder = Path(config._tmp_path_factory.getbasetemp())  # what tmp_path_factory gives
        self.log = self.folder / "side-lane.log"
        self.listed = self.folder / "side-lane-tests.txt"
        self.proc: subprocess.Popen | None = None
        self.status: int | None = None  # its exit status, once it ended

    def argv(self) -> list[str]:
        config = self.config
        overrides = config.getoption("override_ini") or []
        plugins = [p for p in (config.option.plugins or []) if p != "no:cacheprovider"]
        options = passed_options(config.option, overrides, plugins, config.known_args_namespace.pythonwarnings or [])
        where = ["--rootdir", str(config.rootpath)] + (["-c", str(config.inipath)] if config.inipath else [])
        basetemp = ["--basetemp", str(self.folder / "side-lane")]  # inside this lane's: kept with it
        # its own cache, unshared: the main lane writes the run's last failures from the replay
        cache = ["-p", "no:cacheprovider"]
        return [sys.executable, "-m", "pytest", *test_files(self.nodeids), *where, *basetemp, *cache, *options]

    def start(self) -> None:
        if self.proc is not None or not self.nodeids:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        self.listed.write_text("\n".join(self.nodeids) + "\n")
        reports_file(self.listed).unlink(missing_ok=True)
        env = dict(os.environ, **{SIDE_LANE_ENV: str(self.listed), SIDE_LANE_PARENT_ENV: str(os.getpid())})
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                self.argv(),
                cwd=self.config.rootpath,  # the node ids' paths are the rootdir's
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # its own process group: a Ctrl-C reaches it through stop()
            )
        say(self.config)(
            f"side lane: {len(self.nodeids)} tests (those on a cluster of their own, then the fast ones) "
            f"run beside the shared cluster's, in pid {self.proc.pid}; output in {self.log}"
        )

    def finish(self, interrupted: bool = False) -> int:
        """Wait for the side lane (started now, if it never was) and return its exit status; stop
        it instead when the main lane was interrupted, or is while it waits."""
        if self.status is not None:
            return self.status
        if not self.nodeids or (self.proc is None and interrupted):
            self.status = 0
            return self.status
        if self.proc is None:
            self.start()
        try:
            if interrupted:
                self.stop()
            else:
                self.proc.wait(timeout=SIDE_LANE_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            self.stop()
            say(self.config)(f"side lane: still running after {SIDE_LANE_TIMEOUT_SECONDS:.0f} s; stopped")
        except BaseException:  # Ctrl-C while waiting: its clusters go down before this lane's
            self.stop()
            raise
        self.status = self.proc.returncode
        return self.status

    def stop(self) -> None:
        """SIGTERM, which the side lane turns into an interrupt (stop_on_sigterm): its fixtures
        still take their clusters down. SIGKILL if it has not ended within 3 minutes."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=180)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()

    def reports(self) -> list[dict]:
        path = reports_file(self.listed)
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError as err:
            return f"(no side lane output: {err})"


SIDE_LANE = pytest.StashKey[SideLane]()  # the run's side lane, kept on pytest's config when it has one


def start_side_lane(config) -> None:
    """Start the run's side lane, if it has one: the shared cluster is up (or never will be)."""
    side = config.stash.get(SIDE_LANE, None)
    if side is not None:
        side.start()


def finish_side_lane(config) -> None:
    """Wait until the run's side lane (if any) has ended: before the shared cluster goes down,
    so the clusters end last in, first out (each puts back the kernel settings its kubelets
    found, tfmw.devcluster.nodes.read_kernel_sysctls: the shared cluster's are the machine's)."""
    side = config.stash.get(SIDE_LANE, None)
    if side is not None:
        side.finish()


def say(config):
    """A line to the terminal, between pytest's own, also from inside a test's setup (whose
    output pytest otherwise captures)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None:
        return print

    def write(text: str) -> None:
        if reporter._tw.width_of_current_line:  # after a progress line's "[100%]"
            reporter._tw.line()
        reporter.write_line(text)

    def line(text: str) -> None:
        if capture is None:
            write(text)
            return
        with capture.global_and_fixture_disabled():
            write(text)

    return line


def stop_on_sigterm() -> None:
    """SIGTERM ends the run as Ctrl-C does, so the fixtures' teardowns run (a cluster is taken
    down). SIGINT will not do for the side lane: a process started from a non-interactive shell
    inherits it ignored, and Python keeps that."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def _end_with_parent(parent: int) -> None:
    """In the side lane: should the main lane die without stopping it (SIGKILL), stop as if it had."""

    def watch():
        while os.getppid() == parent:
            time.sleep(1)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="side-lane-parent-watch", daemon=True).start()


# ---------------------------------------------------------------- the plugin's hooks


def _markers(item) -> set[str]:
    return {m.name for m in item.iter_markers()}


def _in_side_lane() -> str | None:
    return os.environ.get(SIDE_LANE_ENV)


@pytest.hookimpl(trylast=True)  # after the suite's order (tests/conftest.py)
def pytest_collection_modifyitems(config, items):
    side_file = _in_side_lane()
    if side_file:  # this is the side lane: the tests the main lane gave it, in its order
        stop_on_sigterm()
        _end_with_parent(int(os.environ.get(SIDE_LANE_PARENT_ENV) or os.getppid()))
        order = {nodeid: index for index, nodeid in enumerate(Path(side_file).read_text().splitlines())}
        items[:] = sorted((item for item in items if item.nodeid in order), key=lambda item: order[item.nodeid])
        return
    if config.option.collectonly:
        return
    side = split([(item.nodeid, _markers(item)) for item in items])
    if side:
        config.stash[SIDE_LANE] = SideLane(config, side)
        stop_on_sigterm()  # this lane too: its teardown stops the side lane and the shared cluster
        moved = set(side)
        items[:] = [item for item in items if item.nodeid not in moved]  # reported at the end, replayed


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """In the side lane, before each test: SIGTERM is an interrupt again (a test of the
    launcher may have handed it to a launcher it ran in this process)."""
    if _in_side_lane():
        stop_on_sigterm()


def pytest_runtest_logreport(report):
    _hand_back(report)


def pytest_collectreport(report):
    if report.failed:
        _hand_back(report)


_CONFIG: list = []  # the side lane's config, for its reports' serialization


def pytest_configure(config):
    if _in_side_lane():
        _CONFIG.append(config)


def _hand_back(report) -> None:
    """In the side lane: the report, serialized, for the main lane to replay."""
    side_file = _in_side_lane()
    if not side_file or not _CONFIG:
        return
    data = _CONFIG[0].hook.pytest_report_to_serializable(config=_CONFIG[0], report=report)
    with open(reports_file(side_file), "a") as out:
        out.write(json.dumps(data) + "\n")


class _Replay:
    """A side lane's report, as if this lane had run its test: every plugin hears it (the JUnit
    file, the last-failed cache, the session's count) but the terminal's progress line, and the
    terminal's summary counts it (its stats, as the terminal itself files a report)."""

    def __init__(self, config):
        self.config = config
        self.reporter = config.pluginmanager.get_plugin("terminalreporter")
        quiet = [self.reporter] if self.reporter is not None else []
        manager = config.pluginmanager
        self.logreport = manager.subset_hook_caller("pytest_runtest_logreport", remove_plugins=quiet)
        self.collectreport = manager.subset_hook_caller("pytest_collectreport", remove_plugins=quiet)

    def __call__(self, report) -> None:
        if isinstance(report, pytest.CollectReport):
            self.collectreport(report=report)
            category = "error" if report.failed else ""
        else:
            self.logreport(report=report)
            category = self.config.hook.pytest_report_teststatus(report=report, config=self.config)[0]
        if self.reporter is not None and category is not None:
            self.reporter.stats.setdefault(category, []).append(report)


@pytest.hookimpl(tryfirst=True)  # before the JUnit file, the cache and the summary are written
def pytest_sessionfinish(session, exitstatus):
    """Wait for the side lane and replay its reports here; a test it never reported fails."""
    side = session.config.stash.get(SIDE_LANE, None)
    if side is None:
        return
    config = session.config
    # interrupted, or stopped at its failures' limit (-x, --maxfail): the side lane stops too
    maxfail = config.option.maxfail
    stopping = exitstatus == pytest.ExitCode.INTERRUPTED or bool(maxfail and session.testsfailed >= maxfail)
    status = side.finish(interrupted=stopping)
    replay = _Replay(config)
    reported = []
    for data in side.reports():
        report = config.hook.pytest_report_from_serializable(config=config, data=data)
        replay(report)
        if getattr(report, "when", None) == "teardown":  # a test's last report: it ran whole
            reported.append(report.nodeid)
    lost = [] if stopping else missing(side.nodeids, reported)
    for nodeid in lost:
        why = f"handed to the side lane (exit {status}), which never reported it: see {side.log}"
        replay(pytest.TestReport(nodeid, (nodeid.split("::", 1)[0], None, nodeid), {}, "failed", why, "call"))
    say(config)(f"side lane: exit {status}, {len(set(reported))} of {len(side.nodeids)} tests reported; {side.log}")
    if lost or status not in (0, pytest.ExitCode.TESTS_FAILED):
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_sep("=", f"side lane output ({side.log})")
            reporter.write(side.output())
    if (status != 0 or lost) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
