"""The chart's side of training.elastic: what it hands the launcher, and every refusal in one
line with the launcher's words (entrypoint.membership.bounds_problem). Rendered by the real helm."""

from __future__ import annotations

import chartkit
import pytest
from chartkit import env_of, one

from entrypoint.membership import bounds_problem

SHARED = ("storage.type=createClaim", "workers.replicas=4")


def worker_env(objects) -> dict[str, str]:
    (container,) = one(objects, "StatefulSet")["spec"]["template"]["spec"]["containers"]
    return {name: item.get("value") for name, item in env_of(container).items()}


def test_elastic_is_off_by_default(helm, render):
    env = worker_env(render(helm, sets=SHARED))
    assert not any(name.startswith("TFMW_ELASTIC_") for name in env)


def test_elastic_hands_the_launcher_its_bounds_and_the_micro_batches(helm, render):
    sets = (*SHARED, "training.elastic.minReplicas=3", "training.config.gradientAccumulationSteps=3")
    env = worker_env(render(helm, sets=sets))
    assert (env["TFMW_ELASTIC_MIN_REPLICAS"], env["TFMW_ELASTIC_GRACE_SECONDS"], env["TFMW_ELASTIC_MICRO_BATCHES"]) == (
        "3",
        "120",
        "3",
    )


@pytest.mark.parametrize(("minimum", "micro"), [(0, 1), (4, 1), (7, 1), (3, 1)])
def test_bounds_that_cannot_shrink_are_refused_with_the_launchers_words(helm, minimum, micro):
    sets = (*SHARED, f"training.elastic.minReplicas={minimum}", f"training.config.gradientAccumulationSteps={micro}")
    error = chartkit.template_error(helm, sets=sets)
    assert bounds_problem(4, micro, minimum) in error


@pytest.mark.parametrize(
    ("sets", "says"),
    [
        (("storage.type=emptyDir",), "needs shared storage mounted in the pods"),
        (("training.command={python,train.py}",), "needs the built-in trainer"),
    ],
)
def test_elastic_needs_a_claim_and_the_builtin_trainer(helm, sets, says):
    base = ("workers.replicas=4", "training.elastic.minReplicas=2", "storage.type=createClaim")
    error = chartkit.template_error(helm, sets=(*base, *sets))
    assert says in error and "training.elastic.minReplicas=2" in error
