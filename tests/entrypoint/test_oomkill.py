"""The kernel's OOM killer told from any other SIGKILL (entrypoint.oomkill): the container's
memory cgroup files, v1 and v2, faked in tmp_path; and the supervisor's restart line when a
real child dies by SIGKILL while the fake counter goes up (or does not, or cannot be read)."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from entrypoint import loglines
from entrypoint.lifecycle import Phase, Reason
from entrypoint.oomkill import OOM_KILLED, MemoryCgroup, human_bytes, oom_cause, oom_message
from entrypoint.supervisor import Supervisor, SupervisorConfig

GIB = 1 << 30
V1_UNLIMITED = 9223372036854771712  # what an unlimited v1 memory cgroup reports
# The line the brief asked for, word for word.
TWO_GIB_LINE = (
    "the trainer was killed by the kernel's OOM killer at the container's memory limit (2.0 GiB): "
    "raise workers.resources.limits.memory or lower training.config.batchSizePerReplica"
)


def v1(root: Path, kills: int | None, limit: int | str | None) -> MemoryCgroup:
    """A cgroup v1 memory controller as runc mounts it in a container: <root>/memory/..."""
    memory = root / "memory"
    memory.mkdir(parents=True, exist_ok=True)
    if kills is not None:
        (memory / "memory.oom_control").write_text(f"oom_kill_disable 0\nunder_oom 0\noom_kill {kills}\n")
    if limit is not None:
        (memory / "memory.limit_in_bytes").write_text(f"{limit}\n")
    return MemoryCgroup(str(root))


def v2(root: Path, kills: int | None, limit: int | str | None) -> MemoryCgroup:
    """A cgroup v2 container: <root>/memory.events, <root>/memory.max."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "memory.events").write_text(
        "low 0\nhigh 0\nmax 12\noom 1\n" + (f"oom_kill {kills}\n" if kills is not None else "") + "oom_group_kill 0\n"
    )
    if limit is not None:
        (root / "memory.max").write_text(f"{limit}\n")
    return MemoryCgroup(str(root))


FAKES = {"v1": v1, "v2": v2}


# -- reading the cgroup ------------------------------------------------------------------
@pytest.mark.parametrize("version", FAKES)
def test_the_counter_and_the_limit_are_read(tmp_path, version):
    cg = FAKES[version](tmp_path, 3, 2 * GIB)
    assert (cg.oom_kills(), cg.limit()) == (3, 2 * GIB)


@pytest.mark.parametrize("version,unlimited", [("v1", V1_UNLIMITED), ("v2", "max")])
def test_no_limit_is_none(tmp_path, version, unlimited):
    assert FAKES[version](tmp_path, 0, unlimited).limit() is None


@pytest.mark.parametrize("version", FAKES)
def test_a_kernel_without_the_counter_is_unknown(tmp_path, version):
    """v1's oom_kill line came with kernel 4.13; without it, unknown, never 0."""
    cg = FAKES[version](tmp_path, None, 2 * GIB)
    if version == "v1":
        (tmp_path / "memory" / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\n")
    assert cg.oom_kills() is None


def test_no_cgroup_file_system_is_unknown(tmp_path):
    cg = MemoryCgroup(str(tmp_path / "nothing-here"))
    assert (cg.oom_kills(), cg.limit()) == (None, None)


def test_unreadable_files_are_unknown(tmp_path):
    (tmp_path / "memory" / "memory.oom_control").mkdir(parents=True)  # EISDIR on read
    (tmp_path / "memory" / "memory.limit_in_bytes").write_bytes(b"\xff\xfe garbage")
    cg = MemoryCgroup(str(tmp_path))
    assert (cg.oom_kills(), cg.limit()) == (None, None)


# -- the cause -------------------------------------------------------------------------
@pytest.mark.parametrize("version", FAKES)
def test_a_counter_that_went_up_is_oom_killed_naming_the_limit(tmp_path, version):
    cg = FAKES[version](tmp_path, 4, 2 * GIB)
    assert oom_cause(3, cg) == f"{OOM_KILLED}: {TWO_GIB_LINE}"


@pytest.mark.parametrize("version", FAKES)
def test_an_unchanged_counter_is_another_sigkill(tmp_path, version):
    assert oom_cause(3, FAKES[version](tmp_path, 3, 2 * GIB)) is None


def test_unknown_before_or_after_is_no_cause(tmp_path):
    assert oom_cause(None, v1(tmp_path, 5, 2 * GIB)) is None
    assert oom_cause(0, MemoryCgroup(str(tmp_path / "gone"))) is None


def test_without_a_limit_the_node_ran_out(tmp_path):
    cause = oom_cause(0, v2(tmp_path, 1, "max"))
    assert cause.startswith(
        "OOMKilled: the trainer was killed by the kernel's OOM killer (the container has no "
        "memory limit: the node ran out of memory)"
    )
    assert "workers.resources.limits.memory" in cause


def test_the_message_is_one_line_naming_the_limit_and_the_fix():
    assert oom_message(2 * GIB) == TWO_GIB_LINE
    assert "(1500 MiB)" in oom_message(1500 << 20)
    assert loglines.one_line(oom_message(None)) == oom_message(None)


@pytest.mark.parametrize(
    "size,shown",
    [
        (2 * GIB, "2.0 GiB"),
        (1500 << 20, "1500 MiB"),
        (512 << 20, "512 MiB"),
        (10**9, "954 MiB"),
        (3 * GIB + 7, "3.0 GiB"),
        (4096, "4096 bytes"),
    ],
)
def test_human_bytes(size, shown):
    assert human_bytes(size) == shown


# -- the supervisor: a real child SIGKILLed, the fake counter raised (as the kernel does first) --
# Attempt 1 raises the counter by `bump` (the OOM killer counts its kill before it sends SIGKILL)
# and SIGKILLs itself; attempt 2 exits 0.
CHILD = """
    import os, pathlib, re, signal, sys
    counter = pathlib.Path(sys.argv[0]).with_name("attempts")
    n = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(n + 1))
    if n == 0:
        events = pathlib.Path({events!r})
        if {bump} and events.exists():
            text = events.read_text()
            kills = int(re.search(r"oom_kill (\\d+)", text).group(1))
            events.write_text(text.replace(f"oom_kill {{kills}}", f"oom_kill {{kills + {bump}}}"))
        os.kill(os.getpid(), signal.SIGKILL)
"""


def supervise(tmp_path: Path, cg: MemoryCgroup, events: Path, bump: int, **kw):
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD.format(events=str(events), bump=bump)))
    logs, causes = [], []
    sup = Supervisor(
        SupervisorConfig(
            command=[sys.executable, str(script)],
            env=dict(os.environ),
            run_dir=tmp_path / "run",
            heartbeat_file=tmp_path / "hb",
            poll_seconds=0.05,
            backoff_first_seconds=0.01,
            log=logs.append,
            on_restart=causes.append,
            memory=cg,
            **kw,
        )
    )
    return sup.run(), logs, causes


def events_file(tmp_path: Path, version: str) -> Path:
    return tmp_path / "cg" / ("memory/memory.oom_control" if version == "v1" else "memory.events")


@pytest.mark.parametrize("version", FAKES)
def test_an_oom_kill_is_named_in_the_restart_line_and_the_trainer_restarts(tmp_path, version):
    cg = FAKES[version](tmp_path / "cg", 7, 2 * GIB)
    ending, logs, causes = supervise(tmp_path, cg, events_file(tmp_path, version), bump=1)
    assert ending.phase is Phase.SUCCEEDED  # retryable: restarted in place, then done
    assert causes == [f"OOMKilled: {TWO_GIB_LINE}"]
    restart = [line for line in logs if "restarting training in place" in line]
    assert restart == [f"tfmw launcher restarting training in place in 0s: OOMKilled: {TWO_GIB_LINE}"]
    parsed = loglines.parse_kind(restart[0], loglines.LAUNCHER)
    assert parsed is not None and "OOMKilled" in parsed.text and "(2.0 GiB)" in parsed.text


@pytest.mark.parametrize("version", FAKES)
def test_a_sigkill_with_the_counter_unchanged_is_reported_as_before(tmp_path, version):
    cg = FAKES[version](tmp_path / "cg", 7, 2 * GIB)
    ending, logs, causes = supervise(tmp_path, cg, events_file(tmp_path, version), bump=0)
    assert ending.phase is Phase.SUCCEEDED
    assert causes == ["killed by signal SIGKILL"]
    assert not any("OOM" in line for line in logs)


def test_no_cgroup_is_reported_as_before(tmp_path):
    ending, logs, causes = supervise(tmp_path, MemoryCgroup(str(tmp_path / "none")), tmp_path / "none" / "x", bump=1)
    assert ending.phase is Phase.SUCCEEDED and causes == ["killed by signal SIGKILL"]


def test_an_oom_kill_counts_against_max_restarts(tmp_path):
    """Like any crash: past training.maxRestarts without progress the run is Failed
    (RestartLimit), and the message names the OOM kill."""
    cg = v1(tmp_path / "cg", 0, 2 * GIB)
    ending, logs, _ = supervise(tmp_path, cg, events_file(tmp_path, "v1"), bump=1, max_restarts=0)
    assert (ending.phase, ending.reason) == (Phase.FAILED, Reason.RESTART_LIMIT)
    assert f"last failure: OOMKilled: {TWO_GIB_LINE}" in ending.message
    assert "giving up" in logs[-1] and "OOMKilled" in logs[-1]
