"""The Dockerfile agrees with the rendered chart and with pyproject.toml.

The chart overrides the image's command and user; these tests make sure running the image
without the chart is the same program as the chart runs, as the same user, and that the base
image carries exactly the TensorFlow the project pins.
"""
from __future__ import annotations

import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from scripts.image import DIGEST_PATTERN, DIGEST_PLACEHOLDER_MARK, read_dockerfile

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "tf-multiworker"
DOCKERFILE = read_dockerfile(REPO_ROOT / "Dockerfile")
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
OVERLAYS = sorted((REPO_ROOT / "values").glob("*.yaml"))


def pyproject_pin(package: str) -> str:
    for requirement in PYPROJECT["project"]["dependencies"]:
        match = re.fullmatch(rf"{re.escape(package)}==(\S+)", requirement.replace(" ", ""))
        if match:
            return match.group(1)
    raise AssertionError(f"pyproject.toml does not pin {package}==<version>")


def render_statefulset(helm_path: str, overlay: Path | None = None) -> dict:
    command = [helm_path, "template", "tfmw", str(CHART)] + (["-f", str(overlay)] if overlay else [])
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    statefulsets = [d for d in yaml.safe_load_all(result.stdout) if d and d.get("kind") == "StatefulSet"]
    assert len(statefulsets) == 1, [d.get("kind") for d in yaml.safe_load_all(result.stdout) if d]
    return statefulsets[0]


def worker_container(statefulset: dict) -> dict:
    containers = statefulset["spec"]["template"]["spec"]["containers"]
    return containers[0]


def effective(statefulset: dict, key: str):
    """A container securityContext field, falling back to the pod's (Kubernetes' own rule)."""
    pod = statefulset["spec"]["template"]["spec"].get("securityContext") or {}
    container = worker_container(statefulset).get("securityContext") or {}
    return container.get(key, pod.get(key))


def image_user() -> tuple[int, int]:
    user, _, group = (DOCKERFILE.user or "").partition(":")
    assert user.isdigit() and group.isdigit(), f"USER must be numeric uid:gid (runAsNonRoot checks it), got {DOCKERFILE.user}"
    return int(user), int(group)


def useradd_words() -> list[str]:
    for command in DOCKERFILE.run_commands:
        for part in command.split("&&"):
            words = shlex.split(part)
            if words[:1] == ["useradd"]:
                return words
    raise AssertionError("the Dockerfile creates no user with useradd")


def option(words: list[str], name: str) -> str:
    return words[words.index(name) + 1]


@pytest.mark.parametrize("overlay", [None] + OVERLAYS, ids=["chart-defaults"] + [p.name for p in OVERLAYS])
def test_image_user_is_the_user_the_chart_runs_as(helm_path, overlay):
    statefulset = render_statefulset(helm_path, overlay)
    uid, gid = image_user()
    assert (effective(statefulset, "runAsUser"), effective(statefulset, "runAsGroup")) == (uid, gid)
    assert effective(statefulset, "runAsNonRoot") is True and uid != 0


def test_the_named_image_user_has_the_same_ids():
    words = useradd_words()
    assert (int(option(words, "--uid")), int(option(words, "--gid"))) == image_user()
    assert words[-1] == "tfmw"
    assert any(f"groupadd --gid {image_user()[1]} tfmw" in c for c in DOCKERFILE.run_commands)


def test_image_home_is_writable_under_the_charts_read_only_root(helm_path):
    # $HOME (~/.keras, ~/.cache) must be one of the chart's writable emptyDirs.
    assert "--create-home" in useradd_words()
    container = worker_container(render_statefulset(helm_path))
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
    assert "/home/tfmw" in mounts and "/tmp" in mounts


def test_image_entrypoint_and_cmd_are_what_the_chart_runs(helm_path):
    container = worker_container(render_statefulset(helm_path))
    assert DOCKERFILE.entrypoint == ["python", "-m", "entrypoint"]
    # chart command = launcher + "run --"; chart args = training.command (+ training.args).
    assert container["command"] == DOCKERFILE.entrypoint + DOCKERFILE.cmd[:2] == DOCKERFILE.entrypoint + ["run", "--"]
    training_command = DOCKERFILE.cmd[2:]
    assert container["args"][: len(training_command)] == training_command == ["python", "-m", "entrypoint.training"]


def test_the_modules_the_image_runs_exist():
    assert (REPO_ROOT / "entrypoint" / "__main__.py").is_file()
    assert (REPO_ROOT / "entrypoint" / "training" / "__main__.py").is_file()


def test_exposed_port_is_the_charts_grpc_port(helm_path):
    ports = worker_container(render_statefulset(helm_path))["ports"]
    grpc = [p["containerPort"] for p in ports if p["name"] == "grpc"]
    text = (REPO_ROOT / "Dockerfile").read_text()
    assert grpc and re.search(rf"^EXPOSE {grpc[0]}$", text, re.M)


def test_base_image_is_pinned_by_tag_and_digest_build_args():
    assert DOCKERFILE.from_images == ["${TF_BASE_IMAGE}:${TF_BASE_TAG}@${TF_BASE_DIGEST}"]
    assert DOCKERFILE.args["TF_BASE_IMAGE"] == "tensorflow/tensorflow"
    assert re.fullmatch(r"\d+\.\d+\.\d+-gpu", DOCKERFILE.args["TF_BASE_TAG"])
    digest = DOCKERFILE.args["TF_BASE_DIGEST"]
    # Either a real digest or the documented placeholder that `make image` refuses to build.
    assert DIGEST_PATTERN.match(digest) or DIGEST_PLACEHOLDER_MARK in digest, digest


def test_base_tensorflow_is_the_version_pyproject_pins():
    base_tf = DOCKERFILE.args["TF_BASE_TAG"].removesuffix("-gpu")
    assert base_tf == pyproject_pin("tensorflow")
    major_minor = ".".join(base_tf.split(".")[:2])
    # The build fails if the base image's TensorFlow is not this minor version.
    assert any(f"tf.__version__.startswith('{major_minor}.')" in c for c in DOCKERFILE.run_commands)


def test_image_installs_the_pinned_tf_keras_and_never_a_second_tensorflow():
    pip_installs = [part.strip() for c in DOCKERFILE.run_commands for part in c.split("&&")
                    if part.strip().startswith("pip install")]
    assert pip_installs, "the Dockerfile installs nothing with pip"
    for install in pip_installs:
        words = shlex.split(install)
        assert "--no-cache-dir" in words, install
        packages = [w for w in words[2:] if not w.startswith("-")]
        assert not any(re.match(r"tensorflow\b", p) for p in packages), f"second tensorflow install: {install}"
        if any(p.startswith("tf-keras") or p.startswith("/") or p == "." for p in packages):
            # tf-keras depends on tensorflow, the package on tensorflow and pyhelm3.
            assert "--no-deps" in words, install
    assert any(f"tf-keras=={pyproject_pin('tf-keras')}" in i for i in pip_installs)


def test_runtime_environment():
    assert DOCKERFILE.env["TF_USE_LEGACY_KERAS"] == "1"  # keras-team/keras#20585, see DESIGN.md
    assert DOCKERFILE.env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert DOCKERFILE.env["PYTHONUNBUFFERED"] == "1"
    assert DOCKERFILE.workdir


def test_no_healthcheck_and_oci_labels():
    text = (REPO_ROOT / "Dockerfile").read_text()
    assert not re.search(r"^HEALTHCHECK", text, re.M)  # Kubernetes probes decide
    for label in ("title", "version", "licenses", "base.name", "base.digest"):
        assert f"org.opencontainers.image.{label}" in DOCKERFILE.labels


def test_make_image_tag_is_the_image_the_chart_pulls_by_default():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["tag"] in ("", None)  # empty: the chart's appVersion
    assert str(chart["appVersion"]) == PYPROJECT["project"]["version"]
    assert values["image"]["repository"].rsplit("/", 1)[-1] == "tf-multiworker"


def test_dockerignore_lets_in_exactly_what_the_build_copies():
    allowed = {line[1:].rstrip("/") for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
               if line.startswith("!")}
    copied = {Path(source).as_posix().rstrip("/") for source in DOCKERFILE.copy_sources}
    assert copied == allowed
    assert PYPROJECT["project"]["readme"] in allowed  # setuptools reads it during `pip install`
