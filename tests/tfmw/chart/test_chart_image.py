"""The worker image: one build for the whole group.

A tag can move between two nodes' pulls: the chart pulls a tag `Always` unless a digest pins
it or the overlay chose a policy itself, values/prod.yaml refuses to render without a digest,
and checkov's digest check is skipped only where an overlay says it runs a tag on purpose.
"""

from __future__ import annotations

import chartkit
import pytest
from chartkit import ALL_ON, STAND_IN_DIGEST, one, overlay_path, pod_templates

from tfmw.deploy.observe import IMAGE_ANNOTATION

DIGEST = "sha256:" + "ab" * 32


def images(objects: list[dict]) -> dict[str, tuple[str, str]]:
    """`Kind/name` -> (image, imagePullPolicy) of each pod's first container."""
    return {
        name: (spec["containers"][0]["image"], spec["containers"][0]["imagePullPolicy"])
        for name, spec, _ in pod_templates(objects)
    }


def checkov_skips(obj: dict) -> set[str]:
    annotations = obj["metadata"].get("annotations") or {}
    return {v.split("=", 1)[0] for k, v in annotations.items() if k.startswith("checkov.io/skip")}


ON = ("tensorboard.enabled=true", "storage.type=createClaim", "evaluator.enabled=true")


@pytest.mark.parametrize(
    "sets,policy",
    [
        ((), "Always"),  # a tag (the chart's default <appVersion>-cpu)
        (("image.tag=latest",), "Always"),
        (("image.tag=1.2",), "Always"),
        ((f"image.digest={DIGEST}",), "IfNotPresent"),
        (("image.tag=1.2", "image.pullPolicy=IfNotPresent"), "IfNotPresent"),  # the overlay's own choice wins
        ((f"image.digest={DIGEST}", "image.pullPolicy=Always"), "Always"),
    ],
)
def test_a_tag_is_pulled_always_unless_a_digest_pins_it_or_a_policy_is_chosen(render, helm, sets, policy):
    objects = render(helm, sets=(*ON, *sets))
    got = images(objects)
    assert {p for _, p in got.values()} == {policy}, got
    assert {"StatefulSet/tfmw-tf-multiworker", "Pod/tfmw-tf-multiworker-test-peers"} <= set(got)
    assert any(n.startswith("Deployment/") for n in got), got  # TensorBoard, the evaluator


def test_an_auxiliary_pod_with_its_own_tag_is_pulled_always_beside_digest_pinned_workers(render, helm):
    objects = render(helm, sets=(*ON, f"image.digest={DIGEST}", "tensorboard.image.tag=2.0-cpu"))
    got = images(objects)
    assert got["StatefulSet/tfmw-tf-multiworker"] == (f"ghcr.io/tf-multiworker/tf-multiworker@{DIGEST}", "IfNotPresent")
    assert got["Deployment/tfmw-tf-multiworker-tensorboard"] == (
        "ghcr.io/tf-multiworker/tf-multiworker:2.0-cpu",
        "Always",
    )


def test_a_registry_port_is_no_tag(render, helm):
    sts = one(render(helm, sets=("image.repository=registry:5000/ml/tfmw", "image.tag=1.2")), "StatefulSet")
    assert sts["spec"]["template"]["spec"]["containers"][0]["image"] == "registry:5000/ml/tfmw:1.2"


@pytest.mark.parametrize("env", ["local", "dev", "staging"])
def test_overlays_that_run_a_tag_say_so_and_local_keeps_the_imported_image(render, helm, env):
    """The local cluster imports the image into its nodes (no registry): IfNotPresent, set in
    its overlay; dev and staging pull their tag Always. Each says it runs a tag on purpose."""
    objects = render(helm, overlay_path(env))
    policy = "IfNotPresent" if env == "local" else "Always"
    assert {p for _, p in images(objects).values()} == {policy}
    assert "CKV_K8S_43" in checkov_skips(one(objects, "StatefulSet"))


def test_prod_renders_only_with_a_digest_and_pulls_it_if_not_present(render, helm):
    refused = chartkit.template_error(helm, [overlay_path("prod")], ["image.digest="])
    assert "image.digest is empty and image.requireDigest is true" in refused
    assert len([line for line in refused.splitlines() if "requireDigest" in line]) == 1
    objects = render(helm, overlay_path("prod"))  # chartkit stands in the release pipeline's digest
    assert set(images(objects).values()) == {
        (f"ghcr.io/tf-multiworker/tf-multiworker@{STAND_IN_DIGEST}", "IfNotPresent")
    }
    assert "CKV_K8S_43" not in checkov_skips(one(objects, "StatefulSet"))


@pytest.mark.parametrize(
    "sets,skipped",
    [
        ((), False),  # an empty digest alone is what the check is there to catch
        (("image.allowMutableTag=true",), True),
        (("image.allowMutableTag=true", f"image.digest={DIGEST}"), False),  # pinned: nothing to skip
    ],
)
def test_checkov_digest_check_is_skipped_only_by_an_explicit_choice(render, helm, sets, skipped):
    for obj in (o for o in render(helm, sets=(*ON, *sets)) if o["kind"] in ("StatefulSet", "Deployment", "Pod")):
        assert ("CKV_K8S_43" in checkov_skips(obj)) is skipped, obj["metadata"]["name"]


def test_checkov_pull_policy_skip_follows_the_policy_the_pods_get(render, helm):
    always = one(render(helm), "StatefulSet")
    assert "CKV_K8S_15" not in checkov_skips(always)
    pinned = one(render(helm, sets=(f"image.digest={DIGEST}",)), "StatefulSet")
    assert "CKV_K8S_15" in checkov_skips(pinned)
    assert "CKV_K8S_15" in checkov_skips(one(render(helm, ALL_ON), "StatefulSet"))


notes = chartkit.notes


def test_notes_name_the_image_its_pull_policy_and_how_to_read_the_digest_each_worker_runs():
    tagged = notes()
    assert (
        "Image ghcr.io/tf-multiworker/tf-multiworker:0.1.0-cpu, imagePullPolicy Always: a tag, which can move" in tagged
    )
    # read live from the workers (a plain helm user has no `make deploy` to record it), and the
    # annotation `make deploy` writes (tfmw.deploy.observe) named
    live = '-o jsonpath=\'{range .items[*]}{.metadata.name}{" "}{.status.containerStatuses[0].imageID}'
    assert "get pods -l app.kubernetes.io/instance=tfmw,app.kubernetes.io/component=worker " + live in tagged
    assert f"on the StatefulSet as {IMAGE_ANNOTATION}" in tagged
    pinned = notes(f"image.digest={DIGEST}")
    assert f"Image ghcr.io/tf-multiworker/tf-multiworker@{DIGEST}, imagePullPolicy IfNotPresent.\n" in pinned
    assert "a tag, which can move" not in pinned
