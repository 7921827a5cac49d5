"""The suite's two lanes (tests/support/lanes.py): what goes beside the shared cluster, and a real
run of a small suite through them (two pytest processes)."""

from __future__ import annotations

import argparse
import textwrap

import lanes
import pytest
from repo import REPO

pytest_plugins = ["pytester"]


def test_the_fast_tests_and_the_own_clusters_go_beside_the_shared_cluster():
    items = [
        ("unit", set()),
        ("training", {"slow"}),
        ("completion", {"slow", "cluster"}),
        ("registry", {"slow", "cluster", "last"}),
        ("node_loss", {"slow", "cluster", "own_cluster"}),
        ("chart", set()),
        ("unmarked-cluster", {"cluster"}),  # on the shared cluster, though not marked slow: stays
    ]
    assert lanes.split(items) == ["unit", "node_loss", "chart"]


def test_without_a_shared_cluster_test_nothing_moves():
    items = [("unit", set()), ("training", {"slow"}), ("node_loss", {"slow", "cluster", "own_cluster"})]
    assert lanes.split(items) == []
    assert lanes.split([]) == []


def test_the_side_lane_reports_as_the_main_lane_does():
    option = argparse.Namespace(durations=40, verbose=-1, maxfail=1, xmlpath="/out/junit.xml")
    assert lanes.passed_options(option, ["junit_logging=all"]) == [
        "--durations=40",
        "-q",
        "--maxfail=1",
        "--junitxml=/out/junit.side-lane.xml",
        "-o",
        "junit_logging=all",
    ]
    assert lanes.passed_options(argparse.Namespace(durations=None, verbose=2), []) == ["-vv"]


SUITE = {
    "conftest.py": """
        import pytest

        pytest_plugins = ["lanes"]

        @pytest.fixture(scope="session")
        def cluster(request):
            from lanes import start_side_lane

            start_side_lane(request.config)  # as tests/e2e/cluster's fixture does once it is up
            return "shared"
    """,
    "test_suite.py": """
        import os, time
        from pathlib import Path
        import pytest

        LANE = "side" if os.environ.get("TFMW_SIDE_LANE") else "main"
        MARK = Path(__file__).parent / "side-ran"

        @pytest.mark.slow
        def test_training():
            assert LANE == "main" and not MARK.exists()  # before the cluster: alone

        @pytest.mark.slow
        @pytest.mark.cluster
        def test_on_the_shared_cluster(cluster):
            deadline = time.monotonic() + 60
            while not MARK.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert LANE == "main" and MARK.exists()  # the side lane ran meanwhile

        def test_fast():
            assert LANE == "side"
            MARK.write_text(str(os.getpid()))

        @pytest.mark.slow
        @pytest.mark.cluster
        @pytest.mark.own_cluster
        def test_on_a_cluster_of_its_own():
            assert LANE == "side"
            assert FAIL_OWN == "no"
    """,
    "pytest.ini": """
        [pytest]
        markers =
            slow: x
            cluster: x
            own_cluster: x
    """,
}


@pytest.fixture
def suite(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO / "tests" / "support"))
    monkeypatch.delenv(lanes.SIDE_LANE_ENV, raising=False)

    def make(fail_own: bool):
        files = {name: textwrap.dedent(text) for name, text in SUITE.items()}
        files["test_suite.py"] += f'\nFAIL_OWN = "{"yes" if fail_own else "no"}"\n'
        pytester.makefile(".ini", pytest=files.pop("pytest.ini"))
        for name, text in files.items():
            (pytester.path / name).write_text(text)
        return pytester

    return make


def test_a_suite_runs_in_two_lanes_the_side_one_beside_the_shared_cluster(suite):
    result = suite(fail_own=False).runpytest_subprocess("-p", "no:cacheprovider", "--durations=5")
    result.assert_outcomes(passed=2, deselected=2)  # the main lane's own count
    out = result.stdout.str()
    assert "side lane: 2 tests" in out and "side lane (exit 0)" in out, out
    assert "2 passed" in out.split("side lane (exit 0)")[1], out  # the side lane's own summary
    assert result.ret == 0


def test_a_failure_in_the_side_lane_fails_the_run(suite):
    result = suite(fail_own=True).runpytest_subprocess("-p", "no:cacheprovider")
    out = result.stdout.str()
    assert "side lane (exit 1)" in out and "test_on_a_cluster_of_its_own" in out, out
    assert result.ret == pytest.ExitCode.TESTS_FAILED
