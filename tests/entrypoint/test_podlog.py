"""entrypoint.podlog: a pod's log kept with the run (size-bounded, rotated), written by the
launcher for its own lines and the trainer's, and printed by `python -m entrypoint logs`."""

from __future__ import annotations

import subprocess
import sys

from launcherkit import SUCCEEDS, Run, command, pod_env
from repo import REPO

from entrypoint.podlog import PodLog, kept, log_path


def test_the_kept_log_rotates_at_half_the_limit_and_keeps_the_newest(tmp_path):
    path = log_path(tmp_path, "w-0")
    log = PodLog(path, limit_bytes=100, say=lambda text: None)
    for i in range(30):
        log.line(f"line {i:02d}")  # 8 bytes each
    log.close()
    newest, older = path.read_text().splitlines(), path.with_name("w-0.log.1").read_text().splitlines()
    assert newest[-1] == "line 29" and older[-1] == f"line {int(newest[0][5:]) - 1:02d}"
    assert path.stat().st_size <= 50 and path.with_name("w-0.log.1").stat().st_size <= 50
    assert [(pod, p.name) for pod, p in kept(tmp_path)] == [("w-0", "w-0.log.1"), ("w-0", "w-0.log")]


def test_a_log_that_cannot_be_written_says_so_once_and_never_raises(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")
    said: list[str] = []
    log = PodLog(blocked / "logs" / "w-0.log", limit_bytes=1000, say=said.append)
    log.line("a")
    log.line("b")
    assert len(said) == 1 and said[0].startswith(f"logs: cannot keep this pod's log in {blocked}/logs/w-0.log (")


def test_the_launcher_keeps_its_lines_and_the_trainers_with_the_run(fake_api, tmp_path):
    run = Run(pod_env(fake_api, tmp_path, TFMW_KEEP_LOG_MIB="1"), command(tmp_path, SUCCEEDS))
    run.until("tfmw launcher idle:")
    assert run.stop() == 0
    kept_lines = log_path(tmp_path / "shared" / "r1", "train-0").read_text().splitlines()
    assert "tfmw progress step=20/40 epoch=1 loss=0.5000 examples_per_sec=10.0" in kept_lines  # the trainer's
    assert any(line.startswith("tfmw completed run=r1") for line in kept_lines)  # the launcher's
    assert any(line.startswith("tfmw launcher idle:") for line in kept_lines)
    printed = subprocess.run(
        [sys.executable, "-m", "entrypoint", "logs", str(tmp_path / "shared" / "r1")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert printed.returncode == 0, printed.stderr
    assert "[pod/train-0] tfmw progress step=20/40" in printed.stdout


def test_no_kept_log_without_the_setting_and_logs_says_so(fake_api, tmp_path):
    run = Run(pod_env(fake_api, tmp_path), command(tmp_path, SUCCEEDS))
    run.until("tfmw launcher idle:")
    assert run.stop() == 0
    assert not (tmp_path / "shared" / "r1" / "logs").exists()
    printed = subprocess.run(
        [sys.executable, "-m", "entrypoint", "logs", str(tmp_path / "shared" / "r1")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert printed.returncode == 3 and printed.stderr.strip() == f"no kept logs in {tmp_path}/shared/r1/logs"


def test_a_bad_keep_log_setting_is_refused_in_one_line():
    import pytest

    from entrypoint.errors import ConfigError
    from entrypoint.settings import load_settings

    base = {"TFMW_POD_NAME": "w-0", "TFMW_NAMESPACE": "ns", "TFMW_SERVICE": "w", "TFMW_REPLICAS": "2"}
    assert load_settings({**base, "TFMW_KEEP_LOG_MIB": "10"}).keep_log_mib == 10
    assert load_settings(base).keep_log_mib == 0
    with pytest.raises(ConfigError, match=r"^TFMW_KEEP_LOG_MIB='ten' must be a whole number of MiB, 0 to keep no log"):
        load_settings({**base, "TFMW_KEEP_LOG_MIB": "ten"})
