"""Placement by topology (scheduling.topology) under the real scheduler, on kwok's fake GPU
nodes beside the shared cluster's real ones (tfmw.devcluster.kwok: 2 blocks x 2 racks x 2 nodes
of 8 GPUs, each rack room for 16 one-GPU workers). kwok stands in for the kubelet only: the API
server, the scheduler, the StatefulSet controller and `make status` are the real ones, so what
is shown is where the scheduler puts the group, not whether it trains (no container runs).

- preferred: a 16-worker release fills one rack; a 24-worker one opens a second rack, not all four;
- required: 16 workers in one rack; 24 cannot be in one, so 16 are placed and the rest wait;
- `make status` says over which racks the group sits."""

from __future__ import annotations

from collections import Counter

import pytest
from clusterkit import CHART, REPO, delete_namespace, new_namespace, wait_for

from tfmw.devcluster import kwok

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

RELEASE = "placed"
PER_RACK = 16  # 2 nodes x 8 GPUs, one GPU a worker


@pytest.fixture
def ns(kwok_nodes, cluster, request):
    name = new_namespace(cluster, request.node.name.replace("test_", "t-"))
    yield name
    delete_namespace(cluster, name)


def install(cluster, ns: str, replicas: int, *sets: str) -> None:
    args = ["install", RELEASE, str(CHART), "-n", ns, "-f", str(REPO / "values" / "local.yaml")]
    for item in (
        f"workers.replicas={replicas}",
        *kwok.release_sets(),
        f"scheduling.topology.key={kwok.RACK_LABEL}",
        *sets,
    ):
        args += ["--set", item]
    cluster.helm(*args)


def racks(cluster, kwok_nodes, ns: str) -> tuple[Counter, int]:
    """(workers per rack, workers not placed)."""
    rack_of = {node.name: node.rack for node in kwok_nodes}
    pods = cluster.workers(ns, RELEASE)
    placed = [p["spec"].get("nodeName") for p in pods if p["spec"].get("nodeName")]
    return Counter(rack_of[n] for n in placed), len(pods) - len(placed)


def settled(cluster, kwok_nodes, ns: str, replicas: int, placed: int):
    """Once `replicas` pods exist and `placed` of them are bound: their racks."""

    def done():
        pods = cluster.workers(ns, RELEASE)
        where, waiting = racks(cluster, kwok_nodes, ns)
        return where if len(pods) == replicas and sum(where.values()) == placed else None

    return wait_for(done, 120, f"{placed} of {replicas} workers placed", 1, lambda: str(racks(cluster, kwok_nodes, ns)))


@pytest.mark.parametrize("mode", ["preferred", "required"])
def test_a_group_that_fits_one_rack_lands_in_one_and_status_says_so(cluster, kwok_nodes, ns, mode):
    install(cluster, ns, PER_RACK, f"scheduling.topology.mode={mode}")
    where = settled(cluster, kwok_nodes, ns, PER_RACK, PER_RACK)
    assert len(where) == 1, where
    (rack,) = where
    shown = cluster.tfmw("status", "--namespace", ns, "--release", RELEASE)
    assert shown.returncode == 0, shown.stderr
    assert f"placement by {kwok.RACK_LABEL}: {PER_RACK} workers in 1 domain ({rack} x {PER_RACK})" in shown.stdout


def test_preferred_spreads_a_group_too_big_for_a_rack_over_the_fewest(cluster, kwok_nodes, ns):
    replicas = PER_RACK + PER_RACK // 2
    install(cluster, ns, replicas)
    where = settled(cluster, kwok_nodes, ns, replicas, replicas)
    assert sorted(where.values()) == [PER_RACK // 2, PER_RACK], where  # two racks of four, one of them full


def test_required_keeps_a_group_too_big_for_a_rack_in_one_and_the_rest_wait(cluster, kwok_nodes, ns):
    replicas = PER_RACK + 2
    install(cluster, ns, replicas, "scheduling.topology.mode=required")
    where = settled(cluster, kwok_nodes, ns, replicas, PER_RACK)
    assert list(where.values()) == [PER_RACK], where
    shown = cluster.tfmw("status", "--namespace", ns, "--release", RELEASE).stdout
    assert f"in 1 domain ({next(iter(where))} x {PER_RACK}); 2 not placed yet" in shown
