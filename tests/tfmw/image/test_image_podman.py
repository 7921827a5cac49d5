"""The real worker image: built with podman on the Debian base, run the way the chart runs it.

Slow: the first run builds the base (debootstrap, ~2 min) and the CPU image (~2-4 min); later
runs reuse both (ensure_image's source digest). Needs root, podman and debootstrap, like
`make image BASE=debian`; a missing one fails with make image's own one-line refusal.
"""

from __future__ import annotations

import json
import subprocess
import tarfile
import time
import tomllib
from pathlib import Path

import pytest
import yaml
from repo import REPO as REPO_ROOT

from tfmw.image import build as image

VERSION = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
REPOSITORY = yaml.safe_load((REPO_ROOT / "charts/tf-multiworker/values.yaml").read_text())["image"]["repository"]
# The chart's container securityContext: a read-only root, user 1000, every capability dropped.
LOCKED_DOWN = ["--rm", "--read-only", "--user", "1000:1000", "--cap-drop", "ALL", "--network", "none"]
RUN_TIMEOUT_SECONDS = 120


@pytest.fixture(scope="module")
def built() -> tuple[str, str, list[str]]:
    """(reference, podman path, progress lines) of the CPU image on the Debian base."""
    lines: list[str] = []
    try:
        podman = image.select_engine("podman")
        ref = image.ensure_image("cpu", "debian", progress=lines.append, engine="podman")
    except image.ImageError as error:
        pytest.fail(f"make image BASE=debian refused: {error}")
    return ref, podman, lines


def podman_run(podman: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [podman, "run", *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
        env=image.engine_env(podman),
    )


@pytest.mark.slow
def test_the_cpu_image_runs_the_launcher_as_user_1000_on_a_read_only_root(built):
    ref, podman, lines = built
    assert ref == f"{REPOSITORY}:{VERSION}-cpu"  # what the chart pulls with workers.gpus 0
    usage = podman_run(podman, *LOCKED_DOWN, ref, "--help")
    assert usage.returncode == 0, usage.stderr
    assert usage.stdout.startswith("usage: python -m entrypoint") and "tf-config" in usage.stdout
    uid = podman_run(podman, *LOCKED_DOWN, "--entrypoint", "id", ref, "-u")
    assert uid.returncode == 0 and uid.stdout.strip() == "1000", uid
    tf = podman_run(
        podman,
        *LOCKED_DOWN,
        "--entrypoint",
        "python",
        ref,
        "-c",
        "import tensorflow as tf, tf_keras; print(tf.__version__)",
    )
    assert tf.returncode == 0 and tf.stdout.strip().startswith("2.21."), tf.stderr[-2000:]


@pytest.mark.slow
def test_a_second_ensure_image_reuses_the_image_without_building(built):
    ref, podman, _ = built
    before = image.image_id(ref, podman)
    lines: list[str] = []
    started = time.monotonic()
    assert image.ensure_image("cpu", "debian", progress=lines.append, engine="podman") == ref
    elapsed = time.monotonic() - started
    assert image.image_id(ref, podman) == before
    assert not any(line.startswith(("image: building", "image: built")) for line in lines), lines
    assert any(line.startswith(f"image: {ref} is up to date") for line in lines), lines
    assert elapsed < 30, f"an up-to-date check took {elapsed:.0f}s"


@pytest.mark.slow
def test_the_hosts_local_ca_certificates_are_not_in_the_image(built):
    # The build trusted them through a read-only mount; the image must keep Debian's bundle only.
    ref, podman, _ = built
    bundle = podman_run(podman, *LOCKED_DOWN, "--entrypoint", "cat", ref, "/etc/ssl/certs/ca-certificates.crt")
    assert bundle.returncode == 0 and "BEGIN CERTIFICATE" in bundle.stdout
    for local in sorted(Path("/usr/local/share/ca-certificates").glob("**/*.crt")):
        body = "".join(line for line in local.read_text().splitlines() if line and not line.startswith("-----"))
        assert body not in bundle.stdout.replace("\n", ""), f"{local} is in the image's CA bundle"
    config = image.inspect_image(podman, ref)["Config"]
    assert not any(entry.startswith(("PIP_CERT=", "SSL_CERT", "REQUESTS_CA")) for entry in config.get("Env", []))
    assert config["Labels"][image.SOURCE_LABEL]


@pytest.mark.slow
def test_save_archive_writes_a_docker_archive_containerd_can_import(built, tmp_path):
    ref, podman, _ = built
    path = image.save_archive(ref, tmp_path, engine="podman", progress=lambda line: None)
    try:
        assert path.name == image.archive_name(ref, image.image_id(ref, podman)[:12])
        with tarfile.open(path) as archive:
            manifest = json.load(archive.extractfile("manifest.json"))
        assert manifest[0]["RepoTags"] == [ref]  # `ctr -n k8s.io images import` names the image from this
        mtime = path.stat().st_mtime
        assert image.save_archive(ref, tmp_path, engine="podman", progress=lambda line: None) == path
        assert path.stat().st_mtime == mtime
    finally:
        path.unlink(missing_ok=True)
