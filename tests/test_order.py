"""The suite's order: what shares a cluster runs before what changes or replaces it."""

from __future__ import annotations

from testorder import run_order


def test_cluster_tests_run_last_and_a_cluster_of_their_own_after_every_shared_one():
    tests = [
        ("node_loss", {"slow", "cluster", "own_cluster"}),
        ("unit", set()),
        ("registry", {"slow", "cluster", "last"}),
        ("completion", {"slow", "cluster"}),
        ("training", {"slow"}),
        ("ops", {"slow", "cluster"}),
    ]
    ordered = [name for name, markers in sorted(tests, key=lambda t: run_order(t[1]))]
    assert ordered == ["unit", "training", "completion", "ops", "registry", "node_loss"]
