"""The suite's two lanes (tests/support/lanes.py): what goes beside the shared cluster, and a real
run of a small suite through them (two pytest processes)."""

from __future__ import annotations

import argparse
import textwrap

import lanes
import pytest
from repo import REPO

pytest_plugins = ["pytester"]


def test_the_own_clusters_then_the_fast_tests_go_beside_the_shared_cluster():
    items = [
        ("unit", set()),
        ("training", {"slow"}),
        ("completion", {"slow", "cluster"}),
        ("registry", {"slow", "cluster", "last"}),
        ("node_loss", {"slow", "cluster", "own_cluster"}),
        ("chart", set()),
        ("unmarked-cluster", {"cluster"}),  # on the shared cluster, though not marked slow: stays
        ("dtype", {"slow", "beside"}),  # real training, nothing timed
        ("cluster-beside", {"slow", "cluster", "beside"}),  # on the shared cluster: stays
    ]
    assert lanes.split(items) == ["node_loss", "unit", "chart", "dtype"]


def test_without_a_shared_cluster_test_nothing_moves():
    items = [("unit", set()), ("training", {"slow"}), ("node_loss", {"slow", "cluster", "own_cluster"})]
    assert lanes.split(items) == []
    assert lanes.split([]) == []


def test_the_side_lane_collects_only_its_tests_files_and_runs_as_the_main_lane_asks():
    ids = ["tests/a.py::t[x::y]", "tests/b.py::t", "tests/a.py::u", "tests/c.py"]
    assert lanes.test_files(ids) == ["tests/a.py", "tests/b.py", "tests/c.py"]
    option = argparse.Namespace(durations=40, verbose=-1, maxfail=1)
    assert lanes.passed_options(option, ["junit_logging=all"], ["myplugin"], ["error::UserWarning"]) == [
        "--durations=40",
        "-q",
        "--maxfail=1",
        "-p",
        "myplugin",
        "-W",
        "error::UserWarning",
        "-o",
        "junit_logging=all",
    ]
    assert lanes.passed_options(argparse.Namespace(durations=None, verbose=2), [], [], []) == ["-vv"]


def test_a_test_handed_over_and_never_reported_is_named():
    assert lanes.missing(["a", "b", "c"], ["c", "a", "a"]) == ["b"]


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
            if KILL_SIDE:
                os.kill(os.getpid(), 9)  # the side lane dies, reporting nothing more

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

    def make(fail_own: bool, kill_side: bool = False):
        files = {name: textwrap.dedent(text) for name, text in SUITE.items()}
        files["test_suite.py"] += f'\nFAIL_OWN = "{"yes" if fail_own else "no"}"\nKILL_SIDE = {kill_side}\n'
        pytester.makefile(".ini", pytest=files.pop("pytest.ini"))
        for name, text in files.items():
            (pytester.path / name).write_text(text)
        return pytester

    return make


def test_a_suite_runs_in_two_lanes_the_side_one_beside_the_shared_cluster(suite, tmp_path):
    junit = tmp_path / "junit.xml"
    options = ("-p", "no:cacheprovider", "--durations=5", f"--junitxml={junit}")
    result = suite(fail_own=False).runpytest_subprocess(*options)
    result.assert_outcomes(passed=4)  # one count: the side lane's reports replayed into the main lane's
    out = result.stdout.str()
    assert "side lane: 2 tests" in out and "side lane: exit 0, 2 of 2 tests reported" in out, out
    assert junit.read_text().count("<testcase ") == 4  # one JUnit file, every test in it
    assert result.ret == 0


def test_a_failure_in_the_side_lane_fails_the_run_and_is_shown_as_its_own(suite):
    result = suite(fail_own=True).runpytest_subprocess("-p", "no:cacheprovider", "-rf")
    result.assert_outcomes(passed=3, failed=1)
    out = result.stdout.str()
    assert "FAILED test_suite.py::test_on_a_cluster_of_its_own" in out, out  # the summary names it
    assert 'assert FAIL_OWN == "no"' in out, out  # with its traceback
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_a_side_lane_that_dies_fails_the_run_naming_the_tests_it_never_ran(suite):
    result = suite(fail_own=False, kill_side=True).runpytest_subprocess("-p", "no:cacheprovider", "-rf")
    out = result.stdout.str()
    assert "FAILED test_suite.py::test_fast" in out, out
    assert "handed to the side lane (exit -9), which never reported it" in out, out
    assert "side lane output" in out, out  # what it printed, since it did not end as a run does
    assert result.ret == pytest.ExitCode.TESTS_FAILED
