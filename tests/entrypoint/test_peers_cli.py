"""`python -m entrypoint check-peers`: the launcher's peer wait on the names given (the chart's
`helm test` pod runs it). Exit 0 once every name is ready, else 3 with one line naming the rest."""

from __future__ import annotations

import subprocess
import sys

import pytest

from entrypoint import cli
from entrypoint.errors import EXIT_OK, EXIT_PEERS_NOT_FOUND
from entrypoint.peers import port_accepts


def check_peers(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["check-peers", *argv], env={})
    out, err = capsys.readouterr()
    return code, out, err


def test_exits_0_when_every_name_resolves(capsys):
    code, out, err = check_peers(capsys, "--timeout-seconds", "0", "localhost", "127.0.0.1")
    assert code == EXIT_OK, err
    assert out.strip().splitlines()[-1].startswith("tfmw launcher peers: all 2 resolved after")
    assert err == ""


def test_exits_3_with_one_line_naming_the_name_that_never_resolved(capsys):
    code, _, err = check_peers(capsys, "--timeout-seconds", "0", "localhost", "no-such-worker.invalid")
    assert code == EXIT_PEERS_NOT_FOUND
    assert err.startswith("tfmw: peers not found after 0s: 1 of 2 never resolved: no-such-worker.invalid; ")
    assert "--timeout-seconds" in err and "tests.timeoutSeconds" in err  # what to raise, not peers.timeoutSeconds
    assert len(err.strip().splitlines()) == 1


def test_with_a_port_a_name_counts_once_the_port_accepts(capsys, listener, refused_port):
    code, out, err = check_peers(capsys, "--timeout-seconds", "0", "--port", str(listener), "localhost")
    assert code == EXIT_OK, err
    assert "all 1 reachable" in out
    code, _, err = check_peers(capsys, "--timeout-seconds", "0", "--port", str(refused_port), "localhost")
    assert code == EXIT_PEERS_NOT_FOUND
    assert "1 of 1 never reachable: localhost;" in err and len(err.strip().splitlines()) == 1


def test_port_accepts_is_a_resolver(listener, refused_port):
    assert port_accepts(listener)("127.0.0.1")
    assert not port_accepts(refused_port)("127.0.0.1")
    assert not port_accepts(listener)("no-such-worker.invalid")


@pytest.mark.parametrize(
    "argv",
    [
        ("--timeout-seconds", "-1", "localhost"),
        ("--timeout-seconds", "nan", "localhost"),
        ("--port", "0", "localhost"),
        ("--port", "65536", "localhost"),
        (),
    ],
)
def test_bad_arguments_are_refused_with_exit_2(capsys, argv):
    with pytest.raises(SystemExit) as exited:
        cli.main(["check-peers", *argv], env={})
    assert exited.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_runs_as_a_module_without_the_launchers_environment():
    """As in the test pod: no TFMW_* variables, `python -m entrypoint check-peers`."""
    proc = subprocess.run(
        [sys.executable, "-m", "entrypoint", "check-peers", "--timeout-seconds", "0", "no-such-worker.invalid"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == EXIT_PEERS_NOT_FOUND
    assert proc.stderr.startswith("tfmw: peers not found") and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
