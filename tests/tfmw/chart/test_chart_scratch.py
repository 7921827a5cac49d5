"""The node's scratch (/tmp and the other writable dirs): bounded by writableDirsSizeLimit, which the
GPU overlays set with the ephemeral-storage their workers request, and refused when the dirs' limits
could never be reached before the kubelet evicts the worker."""

from __future__ import annotations

import chartkit
import pytest
import yaml
from chartkit import find, overlay_path

from tfmw.chart import helmkit

GPU_OVERLAYS = ("dev", "staging", "prod")


def bytes_of(quantity: str) -> float:
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}
    return float(quantity[:-2]) * units[quantity[-2:]]


def writable_volumes(objects: list[dict]) -> dict[str, dict]:
    pod = find(objects, "StatefulSet")[0]["spec"]["template"]["spec"]
    return {v["name"]: v for v in pod["volumes"] if v["name"].startswith("writable-")}


def test_no_limit_by_default_and_in_the_local_overlay(helm, render):
    for objects in (render(helm), render(helm, overlay_path("local"))):
        assert [v["emptyDir"] for v in writable_volumes(objects).values()] == [{}, {}]


@pytest.mark.parametrize("env", GPU_OVERLAYS)
def test_gpu_overlays_bound_the_scratch_and_request_its_ephemeral_storage(helm, render, env):
    overlay = yaml.safe_load(overlay_path(env).read_text())
    assert overlay["workers"]["gpus"] >= 1
    objects = render(helm, overlay_path(env))
    limits = {v["emptyDir"].get("sizeLimit") for v in writable_volumes(objects).values()}
    assert limits == {overlay["writableDirsSizeLimit"]}
    container = find(objects, "StatefulSet")[0]["spec"]["template"]["spec"]["containers"][0]
    requested = bytes_of(container["resources"]["requests"]["ephemeral-storage"])
    limited = bytes_of(container["resources"]["limits"]["ephemeral-storage"])
    size_limit = bytes_of(overlay["writableDirsSizeLimit"])
    assert size_limit <= requested <= limited and len(writable_volumes(objects)) * size_limit <= limited


def test_dirs_limits_over_the_ephemeral_storage_limit_are_refused(helm):
    error = chartkit.template_error(
        helm, sets=("writableDirsSizeLimit=5Gi", "workers.resources.limits.ephemeral-storage=8Gi")
    )
    assert (
        "writableDirsSizeLimit=5Gi for each of the 2 writableDirs is more than "
        "workers.resources.limits.ephemeral-storage=8Gi: the kubelet would evict the worker" in error
    )
    assert "raise the ephemeral-storage limit to at least 2 x writableDirsSizeLimit" in error


@pytest.mark.parametrize(
    "sets",
    [
        ("writableDirsSizeLimit=4Gi", "workers.resources.limits.ephemeral-storage=8Gi"),  # equal is fine
        ("writableDirsSizeLimit=4e9", "workers.resources.limits.ephemeral-storage=8Gi"),  # by value
        ("writableDirsSizeLimit=64Gi",),  # no ephemeral-storage limit: nothing to exceed
        ("writableDirsSizeLimit=5Gi", "workers.resources.limits.ephemeral-storage=8Gi", "writableDirs={/tmp}"),
    ],
)
def test_dirs_limits_are_compared_by_value(helm, sets):
    assert chartkit.template(helm, sets=sets)


@pytest.mark.parametrize("bad", ["10GB", "10", "lots", "-1Gi"])
def test_a_size_limit_that_is_not_a_size_is_refused_naming_the_key(helm, bad):
    error = chartkit.template_error(helm, sets=(f"writableDirsSizeLimit={bad}",))
    assert "values don't meet the specifications of the schema" in error
    major = helmkit.helm_major(helm)
    assert ("at '/writableDirsSizeLimit'" if major >= 4 else "- writableDirsSizeLimit:") in error, error
