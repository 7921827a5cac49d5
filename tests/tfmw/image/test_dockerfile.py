"""The Dockerfile agrees with the rendered chart, with pyproject.toml and with the locks.

The chart overrides the image's command and user; these tests make sure running the image
without the chart is the same program as the chart runs, as the same user, that every Python
package comes from the hash lock (tests/lint/test_image_lock.py checks the lock's pins), and
that the step registering the NVIDIA wheels' libraries with the linker covers every directory.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import textwrap
import tomllib
from pathlib import Path

import chartkit
import pytest
import yaml
from repo import REPO as REPO_ROOT

from tfmw.chart import helmkit
from tfmw.image.build import IMAGE_NAME, VARIANTS, BuildPlan, build_command, variant_tag
from tfmw.image.dockerfile import read_dockerfile

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
    files, sets = chartkit.with_required_digest([overlay] if overlay else [], [])
    result = helmkit.helm_template(helm_path, CHART, "tfmw", values_files=files, sets=sets)
    assert result.returncode == 0, result.stderr
    objects = helmkit.parse_manifests(result.stdout)
    statefulsets = [d for d in objects if d["kind"] == "StatefulSet"]
    assert len(statefulsets) == 1, [d["kind"] for d in objects]
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
    assert user.isdigit() and group.isdigit(), (
        f"USER must be numeric uid:gid (runAsNonRoot checks it), got {DOCKERFILE.user}"
    )
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


def test_base_is_a_slim_python_of_the_locks_version_pinnable_by_digest():
    # No digest by default (a clean clone builds with no build arguments); BASE_DIGEST pins it.
    # BuildKit expands `${BASE_DIGEST:+@${BASE_DIGEST}}` to nothing or `@<digest>` (docs/image.md).
    assert DOCKERFILE.from_images == ["${BASE_IMAGE}:${BASE_TAG}${BASE_DIGEST:+@${BASE_DIGEST}}"]
    assert DOCKERFILE.args["BASE_IMAGE"] == "docker.io/library/python"
    assert DOCKERFILE.args["BASE_DIGEST"] == ""
    match = re.fullmatch(r"(3\.\d+)(?:\.\d+)?-slim-[a-z]+", DOCKERFILE.args["BASE_TAG"])
    assert match, DOCKERFILE.args["BASE_TAG"]
    # The locks are resolved for this Python (their wheels are cp311 ones) ...
    lock_script = (REPO_ROOT / "scripts" / "image_lock.sh").read_text()
    assert f"--python-version {match.group(1)}" in lock_script
    # ... and the package's requires-python admits it.
    required = PYPROJECT["project"]["requires-python"]
    assert re.fullmatch(r">=3\.(\d+)", required) and int(match.group(1).split(".")[1]) >= int(required[4:])


def test_the_build_checks_the_installed_tensorflow_is_the_pinned_minor_version():
    major_minor = ".".join(pyproject_pin("tensorflow").split(".")[:2])
    assert any(f"tf.__version__.startswith('{major_minor}.')" in c for c in DOCKERFILE.run_commands)


def pip_installs() -> list[list[str]]:
    return [
        shlex.split(part.strip())
        for c in DOCKERFILE.run_commands
        for part in c.split("&&")
        if part.strip().startswith("pip install")
    ]


def test_every_package_comes_from_the_variants_hash_lock():
    installs = pip_installs()
    assert installs, "the Dockerfile installs nothing with pip"
    for words in installs:
        assert "--no-cache-dir" in words and "--no-deps" in words, words  # deps: the lock's closure only
        packages = [w for w in words[2:] if not w.startswith("-")]
        # No package named on a pip command line: every pin is in the lock, with its hashes.
        assert packages in (["/tmp/requirements.lock"], ["/src"]), words
    lock_installs = [w for w in installs if "-r" in w]
    assert len(lock_installs) == 1 and "--require-hashes" in lock_installs[0]
    # The package itself is built with the lock's setuptools, not a build backend pip would
    # fetch unpinned into an isolated build environment.
    [source_install] = [w for w in installs if "/src" in w]
    assert "--no-build-isolation" in source_install
    assert DOCKERFILE.args["VARIANT"] == "gpu"
    copy = re.search(
        r"^COPY requirements/image-\$\{VARIANT\}\.lock /tmp/requirements\.lock$",
        (REPO_ROOT / "Dockerfile").read_text(),
        re.M,
    )
    assert copy, "the lock is not copied by VARIANT"
    for variant in VARIANTS:
        assert (REPO_ROOT / "requirements" / f"image-{variant}.lock").is_file()


def ldconfig_step() -> str:
    steps = [c for c in DOCKERFILE.run_commands if "ldconfig" in c]
    assert len(steps) == 1, steps
    return steps[0]


def run_ldconfig_step(
    tmp_path: Path, variant: str, lib_dirs: dict[str, list[str]]
) -> tuple[subprocess.CompletedProcess, Path]:
    """The Dockerfile's linker step in bash, with `python` and `ldconfig` stand-ins.

    site-packages is a temporary tree holding nvidia/<name>/lib/<files>; the stand-in
    ldconfig prints, for `-p`, every file in the directories the step registered (what
    the real cache would hold). The conf file goes to tmp_path instead of /etc.
    """
    site = tmp_path / "site-packages"
    for name, files in lib_dirs.items():
        (site / "nvidia" / name / "lib").mkdir(parents=True)
        for file in files:
            (site / "nvidia" / name / "lib" / file).write_text("")
    (site / "nvidia" / "cuda_nvcc" / "bin").mkdir(parents=True, exist_ok=True)  # not a lib dir
    site.mkdir(exist_ok=True)
    conf_dir = tmp_path / "ld.so.conf.d"
    conf_dir.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        case "$2" in *sysconfig*) echo {site};; esac
        """)
    )
    (bin_dir / "ldconfig").write_text(
        textwrap.dedent(f"""\
        #!/bin/bash
        [ "$1" = -p ] || exit 0
        while read -r dir; do
          for f in "$dir"/*; do [ -e "$f" ] && echo "	$(basename "$f") (libc6,x86-64) => $f"; done
        done < {conf_dir}/nvidia-wheels.conf
        """)
    )
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    command = ldconfig_step().replace("/etc/ld.so.conf.d/", f"{conf_dir}/")
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "VARIANT": variant}
    result = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command], env=env, capture_output=True, text=True, timeout=60
    )
    return result, conf_dir / "nvidia-wheels.conf"


GPU_LIBRARIES = {
    "cublas": ["libcublas.so.12", "libcublasLt.so.12"],
    "cudnn": ["libcudnn.so.9"],
    "cusolver": ["libcusolver.so.11"],
    "nvjitlink": ["libnvJitLink.so.12"],
    "curand": ["libcurand.so.10"],
    "cuda_nvrtc": ["libnvrtc.so.12"],
}


def test_linker_registration_covers_every_nvidia_lib_directory_by_glob(tmp_path):
    step = ldconfig_step()
    assert '"${site}"/nvidia/*/lib' in step and "/etc/ld.so.conf.d/" in step
    # A directory no list could know about is registered too: the glob finds it.
    dirs = GPU_LIBRARIES | {"some_future_wheel": ["libfuture.so.1"]}
    result, conf = run_ldconfig_step(tmp_path, "gpu", dirs)
    assert result.returncode == 0, result.stderr
    site = tmp_path / "site-packages"
    assert sorted(conf.read_text().split()) == sorted(str(site / "nvidia" / name / "lib") for name in dirs)


@pytest.mark.parametrize("missing", ["cusolver", "nvjitlink", "curand", "cuda_nvrtc"])
def test_gpu_build_fails_when_a_library_tf_runpath_omits_is_not_registered(tmp_path, missing):
    result, _ = run_ldconfig_step(tmp_path, "gpu", {k: v for k, v in GPU_LIBRARIES.items() if k != missing})
    assert result.returncode != 0
    assert "is not in the linker cache" in result.stderr


def test_cpu_build_registers_nothing_and_passes(tmp_path):
    result, conf = run_ldconfig_step(tmp_path, "cpu", {})
    assert result.returncode == 0, result.stderr
    assert conf.read_text() == ""


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


@pytest.mark.parametrize("overlay", [None] + OVERLAYS, ids=["chart-defaults"] + [p.name for p in OVERLAYS])
def test_make_image_tag_is_the_image_the_chart_pulls_by_default(helm_path, overlay):
    # With an empty image.tag the chart pulls what `make image VARIANT=...` tags: the GPU
    # image for workers with GPUs, the CPU one (-cpu) for workers without.
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["tag"] in ("", None)
    assert str(chart["appVersion"]) == PYPROJECT["project"]["version"]
    assert values["image"]["repository"].rsplit("/", 1)[-1] == IMAGE_NAME
    statefulset = render_statefulset(helm_path, overlay)
    overlay_image = ((yaml.safe_load(overlay.read_text()) if overlay else {}) or {}).get("image") or {}
    # pinned after a real push (docs/image.md), or required (values/prod.yaml; rendered with
    # chartkit's stand-in): the digest wins
    digest = overlay_image.get("digest") or (chartkit.STAND_IN_DIGEST if overlay_image.get("requireDigest") else "")
    if digest:
        assert worker_container(statefulset)["image"].endswith("@" + digest)
        return
    gpus = (worker_container(statefulset).get("resources", {}).get("limits") or {}).get("nvidia.com/gpu", 0)
    # An overlay's own tag (values/dev.yaml: the moving `dev` image) wins; otherwise the variant's.
    tag = overlay_image.get("tag") or variant_tag(PYPROJECT["project"]["version"], "gpu" if int(gpus) > 0 else "cpu")
    assert worker_container(statefulset)["image"].rsplit(":", 1)[-1] == tag


def test_dockerignore_lets_in_exactly_what_the_build_copies():
    allowed = {
        line[1:].rstrip("/") for line in (REPO_ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")
    }
    copied = {
        Path(source.replace("${VARIANT}", variant)).as_posix().rstrip("/")
        for source in DOCKERFILE.copy_sources
        for variant in VARIANTS
    }
    assert copied == allowed
    assert PYPROJECT["project"]["readme"] in allowed  # setuptools reads it during `pip install`


def lock_pins(variant: str) -> dict[str, str]:
    text = (REPO_ROOT / "requirements" / f"image-{variant}.lock").read_text()
    return {m.group(1).lower(): m.group(2) for m in re.finditer(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.M)}


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_lock_holds_the_build_backend_so_the_source_install_needs_no_index(variant):
    # `pip install --no-build-isolation /src` uses what is installed: pyproject's build-system
    # requirements must be in the lock the step before installs.
    pins = lock_pins(variant)
    for requirement in PYPROJECT["build-system"]["requires"]:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*(>=\s*(\S+))?", requirement)
        assert match, f"build requirement {requirement!r}: teach this test its form"
        name, minimum = match.group(1).lower(), match.group(3)
        assert name in pins, f"{name} (build-system.requires) is not in image-{variant}.lock"
        if minimum:
            assert version_tuple(pins[name]) >= version_tuple(minimum), (name, pins[name], minimum)
    assert PYPROJECT["build-system"]["build-backend"] == "setuptools.build_meta"


def test_shell_is_bash_with_pipefail_and_podman_builds_keep_it():
    # Under podman/buildah's default OCI format SHELL is dropped with a warning only.
    assert re.search(r'^SHELL \["/bin/bash", "-o", "pipefail", "-c"\]$', (REPO_ROOT / "Dockerfile").read_text(), re.M)
    plan = BuildPlan("/usr/bin/podman", "x:1", "0", "cpu", REPO_ROOT / "Dockerfile", REPO_ROOT)
    command = build_command(plan)
    assert command[command.index("--format") + 1] == "docker"
    docker = build_command(BuildPlan("/usr/bin/docker", "x:1", "0", "cpu", REPO_ROOT / "Dockerfile", REPO_ROOT))
    assert "--format" not in docker  # docker build always writes the docker format (and has no such flag)


def test_no_ca_certificate_is_baked_into_the_image():
    # The build may trust a local CA through a read-only mount and PIP_CERT, a build argument
    # (not ENV: not in the image's environment); nothing copies or registers a certificate.
    assert "PIP_CERT" in DOCKERFILE.args and DOCKERFILE.args["PIP_CERT"] is None
    assert not any(name.startswith(("PIP_CERT", "REQUESTS_CA", "SSL_CERT")) for name in DOCKERFILE.env)
    assert not any(re.search(r"\.(crt|pem)$", source) for source in DOCKERFILE.copy_sources)
    assert not any("update-ca-certificates" in c or "ca-certificates" in c for c in DOCKERFILE.run_commands)
