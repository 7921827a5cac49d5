"""Two lanes for one run of the suite (tests/conftest.py wires them in).

The shared cluster's tests spend most of their time waiting on Kubernetes (a pod's start, a
node's grace, a rollout): the two cores idle. So once the shared cluster is up, a second pytest
process runs, beside it, what needs neither a quiet machine nor that cluster:

    main lane  this process: the tests that train with real TensorFlow on this machine first
               (their timing wants the cores to themselves), then the shared cluster's tests
    side lane  a second process, started when the shared cluster is up: the fast tests (no
               real training, nothing timed) and the modules with a cluster of their own
               (`own_cluster`: their nodes are not the shared cluster's, and what they do to
               them reaches no other test)

Nothing moves when the run has no shared-cluster test (`make test-fast`, one file, a non-root
machine where the cluster tests skip at once): the lanes exist to fill the cluster's waits.
The side lane's output is printed, and its result counted, at the end of the main lane's.
A pytest plugin (tests/conftest.py loads it): its hooks run once the suite is sorted (testorder).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

# Set in the side lane's environment: the file listing its tests, one node id a line.
SIDE_LANE_ENV = "TFMW_SIDE_LANE"
SIDE_LANE_TIMEOUT_SECONDS = 3600.0


def in_side_lane(markers: set[str]) -> bool:
    """Whether a test runs in the side lane (pure): a fast one (never one on the shared cluster,
    even one not marked slow), or one on a cluster of its own."""
    return "own_cluster" in markers or not ({"slow", "cluster"} & markers)


def split(items: Sequence[tuple[str, set[str]]]) -> list[str]:
    """The node ids of `items` (node id, markers) that go to the side lane; none unless the run
    has a test on the shared cluster (the cluster's waits are what the side lane fills)."""
    shared = any("cluster" in markers and "own_cluster" not in markers for _, markers in items)
    return [nodeid for nodeid, markers in items if in_side_lane(markers)] if shared else []


def passed_options(option, overrides: Iterable[str]) -> list[str]:
    """The main lane's reporting options the side lane runs with too (pure): durations,
    verbosity, how many failures stop it (-x), a JUnit file of its own beside the main lane's, and
    every `-o` override. `option` is pytest's config.option; `overrides` its `-o` values."""
    args: list[str] = []
    if getattr(option, "durations", None) is not None:
        args.append(f"--durations={option.durations}")
    verbose = getattr(option, "verbose", 0) or 0
    if verbose > 0:
        args.append("-" + "v" * verbose)
    elif verbose < 0:
        args.append("-" + "q" * -verbose)
    if getattr(option, "maxfail", 0):
        args.append(f"--maxfail={option.maxfail}")  # -x is --maxfail=1
    xmlpath = getattr(option, "xmlpath", None)
    if xmlpath:
        path = Path(xmlpath)
        args.append(f"--junitxml={path.with_name(path.stem + '.side-lane' + path.suffix)}")
    for override in overrides:
        args += ["-o", override]
    return args


def stop_on_sigterm() -> None:
    """In the side lane: SIGTERM (the main lane stopping it) ends the run as Ctrl-C does, so
    the fixtures' teardowns run (a cluster of its own is taken down). SIGINT will not do: a
    process started from a non-interactive shell inherits it ignored, and Python keeps that."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def selected(nodeids_file: str | os.PathLike) -> set[str]:
    """The side lane's tests, as the main lane listed them."""
    return set(Path(nodeids_file).read_text().splitlines())


class SideLane:
    """The side lane's process: started once, its output kept in a file, waited for at the end."""

    def __init__(self, nodeids: list[str], paths: Sequence[str], options: list[str], folder: Path, rootdir: Path):
        self.nodeids, self.paths, self.options = nodeids, list(paths), options
        self.folder, self.rootdir = Path(folder), Path(rootdir)
        self.log = self.folder / "side-lane.log"
        self.proc: subprocess.Popen | None = None
        self.status: int | None = None  # its exit status, once it ended

    def start(self, say) -> None:
        if self.proc is not None or not self.nodeids:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        listed = self.folder / "side-lane-tests.txt"
        listed.write_text("\n".join(self.nodeids) + "\n")
        argv = [sys.executable, "-m", "pytest", *self.paths, "-p", "no:cacheprovider", *self.options]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                argv,
                cwd=self.rootdir,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(os.environ, **{SIDE_LANE_ENV: str(listed)}),
                start_new_session=True,  # its own process group: stopped whole if the main lane is
            )
        say(
            f"side lane: {len(self.nodeids)} tests (the fast ones, and those on a cluster of their own) run "
            f"beside the shared cluster's, in pid {self.proc.pid}; output in {self.log}"
        )

    def finish(self, say, interrupted: bool = False) -> int:
        """Wait for the side lane (started now, if it never was) and return its exit status;
        stop it instead when the main lane was interrupted."""
        if self.status is not None:
            return self.status
        if not self.nodeids or (self.proc is None and interrupted):
            self.status = 0
            return self.status
        if self.proc is None:
            self.start(say)
        if interrupted:
            self.stop()
        else:
            try:
                self.proc.wait(timeout=SIDE_LANE_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                self.stop()
                say(f"side lane: still running after {SIDE_LANE_TIMEOUT_SECONDS:.0f} s; stopped")
        self.status = self.proc.returncode
        return self.status

    def stop(self) -> None:
        """SIGTERM, which the side lane turns into an interrupt (stop_on_sigterm): its fixtures
        still take their clusters down. SIGKILL if it has not ended within 3 minutes."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=180)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait()

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
        side.start(say(config))


def finish_side_lane(config) -> None:
    """Wait until the run's side lane (if any) has ended: before the shared cluster goes down,
    so the clusters end last in, first out (each puts back the kernel settings its kubelets
    found, tfmw.devcluster.nodes.read_kernel_sysctls: the shared cluster's are the machine's)."""
    side = config.stash.get(SIDE_LANE, None)
    if side is not None:
        side.finish(say(config))


def say(config):
    """A line to the terminal, between pytest's own, also from inside a test's setup (whose
    output pytest otherwise captures)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None:
        return print

    def line(text: str) -> None:
        if capture is None:
            reporter.write_line(text)
            return
        with capture.global_and_fixture_disabled():
            reporter.write_line(text)

    return line


# ---------------------------------------------------------------- the plugin's hooks


def _markers(item) -> set[str]:
    return {m.name for m in item.iter_markers()}


@pytest.hookimpl(trylast=True)  # after the suite's order (tests/conftest.py)
def pytest_collection_modifyitems(config, items):
    side_file = os.environ.get(SIDE_LANE_ENV)
    if side_file:  # this is the side lane: the tests the main lane gave it, nothing else
        stop_on_sigterm()
        _keep(config, items, selected(side_file))
        return
    if config.option.collectonly:
        return
    side = split([(item.nodeid, _markers(item)) for item in items])
    if side:
        overrides = config.getoption("override_ini") or []
        # the session's base temporary folder (what the tmp_path_factory fixture gives)
        folder = Path(config._tmp_path_factory.getbasetemp())
        options = passed_options(config.option, overrides)
        config.stash[SIDE_LANE] = SideLane(side, config.args, options, folder, config.rootpath)
        _keep(config, items, {item.nodeid for item in items} - set(side))


def _keep(config, items, nodeids: set[str]) -> None:
    gone = [item for item in items if item.nodeid not in nodeids]
    if gone:
        config.hook.pytest_deselected(items=gone)
        items[:] = [item for item in items if item.nodeid in nodeids]


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    """Wait for the side lane, print what it printed, and fail the run when it failed."""
    side = session.config.stash.get(SIDE_LANE, None)
    if side is None:
        return
    # interrupted, or stopped at its failures' limit (-x, --maxfail): the side lane stops too
    maxfail = session.config.option.maxfail
    stopping = exitstatus == pytest.ExitCode.INTERRUPTED or bool(maxfail and session.testsfailed >= maxfail)
    status = side.finish(say(session.config), interrupted=stopping)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_sep("=", f"side lane (exit {status}): {side.log}")
        reporter.write(side.output())
    if status not in (0, pytest.ExitCode.NO_TESTS_COLLECTED) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
