"""scheduling.topology: the group placed in as few topology domains as it fits, by the workers'
affinity to each other (the default scheduler) or by Kueue's topology-aware scheduling, and
every refusal in one line. Rendered by the real helm."""

from __future__ import annotations

import chartkit
import pytest
from chartkit import overlay_path

from tfmw.deploy import kueue_update

RACK = "example.com/topology-rack"
KUEUE_SETS = ("scheduling.gang=kueue", "scheduling.kueue.queueName=q")
SHAPE = "tf-multiworker/kueue-shape"
KEY_ANNOTATION = "tf-multiworker/topology-key"
GROUP = {
    "matchLabels": {
        "app.kubernetes.io/component": "worker",
        "app.kubernetes.io/instance": chartkit.RELEASE,
        "app.kubernetes.io/name": "tf-multiworker",
    }
}


def statefulset(render, helm, *sets: str, values=()) -> dict:
    return chartkit.one(render(helm, *values, sets=sets), "StatefulSet")


def pod_affinity(sts: dict) -> dict:
    return (sts["spec"]["template"]["spec"].get("affinity") or {}).get("podAffinity") or {}


def test_no_key_no_placement_by_topology(helm, render):
    sts = statefulset(render, helm)
    assert pod_affinity(sts) == {}
    assert KEY_ANNOTATION not in sts["metadata"]["annotations"]
    assert not any("topology" in key for key in sts["spec"]["template"]["metadata"]["annotations"])


def test_preferred_packs_the_workers_with_each_other_on_the_key(helm, render):
    sts = statefulset(render, helm, f"scheduling.topology.key={RACK}")
    assert pod_affinity(sts) == {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {"labelSelector": GROUP, "topologyKey": RACK}}
        ]
    }
    assert sts["metadata"]["annotations"][KEY_ANNOTATION] == RACK


def test_required_keeps_the_group_in_one_domain_beside_the_users_own_affinity(helm, render):
    own = {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "kubernetes.io/hostname"}
    sets = (
        f"scheduling.topology.key={RACK}",
        "scheduling.topology.mode=required",
        "workers.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchLabels.app=cache",
        "workers.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey=kubernetes.io/hostname",
        "workers.podAntiAffinity=soft",
    )
    affinity = statefulset(render, helm, *sets)["spec"]["template"]["spec"]["affinity"]
    assert affinity["podAffinity"] == {
        "requiredDuringSchedulingIgnoredDuringExecution": [own, {"labelSelector": GROUP, "topologyKey": RACK}]
    }
    assert affinity["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 100


@pytest.mark.parametrize("mode", ["preferred", "required"])
def test_with_kueue_it_is_the_podset_topology_request_and_no_affinity(helm, render, mode):
    sts = statefulset(render, helm, *KUEUE_SETS, f"scheduling.topology.key={RACK}", f"scheduling.topology.mode={mode}")
    annotations = sts["spec"]["template"]["metadata"]["annotations"]
    assert annotations[f"kueue.x-k8s.io/podset-{mode}-topology"] == RACK
    assert [key for key in annotations if key.startswith("kueue.x-k8s.io/")] == [
        f"kueue.x-k8s.io/podset-{mode}-topology"
    ]
    assert pod_affinity(sts) == {}
    assert sts["metadata"]["annotations"][KEY_ANNOTATION] == RACK


def test_under_kueue_a_changed_topology_changes_the_shape_digest_and_none_keeps_the_old_one(helm, render):
    """Kueue reads the topology request once, when it makes the Workload: a change must go
    through 0 like the pod shape (the upgrade check compares this digest). A release with no
    topology keeps the digest it had before the value existed, so upgrading the chart is no change."""

    def digest(*sets):
        return statefulset(render, helm, *KUEUE_SETS, *sets, values=(overlay_path("prod"),))["metadata"]["annotations"][
            SHAPE
        ]

    base = digest()
    assert digest("scheduling.topology.key=") == base
    assert digest("scheduling.topology.mode=required") == base  # no key: nothing requested
    rack = digest(f"scheduling.topology.key={RACK}")
    assert rack != base
    assert digest(f"scheduling.topology.key={RACK}", "scheduling.topology.mode=required") not in (base, rack)
    # Kueue's own webhook sees no change in the pod spec: only the digest keeps it from being lost
    specs = [
        statefulset(render, helm, *KUEUE_SETS, *sets)["spec"]["template"]["spec"]
        for sets in ((), (f"scheduling.topology.key={RACK}",))
    ]
    assert not kueue_update.shape_changes(*specs)


@pytest.mark.parametrize(
    ("sets", "said"),
    [
        (("scheduling.topology.key=Rack Row",), "scheduling.topology.key"),
        (("scheduling.topology.key=-rack",), "scheduling.topology.key"),
        ((f"scheduling.topology.key={RACK}", "scheduling.topology.mode=sometimes"), "scheduling.topology.mode"),
        (("scheduling.topology.zone=a",), "zone"),
    ],
)
def test_bad_topology_values_are_refused_naming_the_value(helm, sets, said):
    error = chartkit.template_error(helm, sets=sets)
    # helm 3 names a value by its dotted path, helm 4 by its JSON pointer
    assert said in error or "/" + said.replace(".", "/") in error, error
