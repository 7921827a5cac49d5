"""The cluster tests' kit, where it needs no cluster: the one-time builds it starts ahead."""

from __future__ import annotations

import os
import time
import types

import clusterkit


def _session(*fixtures: str):
    return types.SimpleNamespace(items=[types.SimpleNamespace(fixturenames=list(fixtures))])


def test_a_build_ahead_starts_only_for_a_fixture_the_session_uses_and_is_waited_for(tmp_path, monkeypatch):
    (tmp_path / "quick_build.py").write_text(
        "import pathlib, sys; pathlib.Path(sys.argv[0]).with_suffix('.done').touch()\n"
    )
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setattr(clusterkit, "BUILDS_AHEAD", {"queued": "quick_build", "other": "quick_build"})
    clusterkit.build_ahead(_session("namespace"), tmp_path)
    assert not clusterkit._AHEAD  # no test wants either
    clusterkit.build_ahead(_session("queued", "cluster"), tmp_path)
    assert set(clusterkit._AHEAD) == {"queued"}
    clusterkit.built_ahead("queued")
    assert (tmp_path / "quick_build.done").exists() and not clusterkit._AHEAD
    clusterkit.built_ahead("queued")  # nothing ahead any more: returns at once


def test_a_build_ahead_no_test_waited_for_is_stopped_whole_at_the_end(tmp_path, monkeypatch):
    (tmp_path / "slow_build.py").write_text(
        "import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "time.sleep(600)\n"
    )
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setattr(clusterkit, "BUILDS_AHEAD", {"queued": "slow_build"})
    clusterkit.build_ahead(_session("queued"), tmp_path)
    proc = clusterkit._AHEAD["queued"]
    time.sleep(1)
    clusterkit.stop_builds_ahead()
    assert proc.returncode is not None and not clusterkit._AHEAD
    deadline, alive = time.monotonic() + 10, True
    while alive and time.monotonic() < deadline:  # its child, SIGTERMed too, is reaped by init
        try:
            os.killpg(proc.pid, 0)
            time.sleep(0.1)
        except ProcessLookupError:
            alive = False
    assert not alive, "the build's own child outlived it"
