"""`make image` (scripts/image.py): engine detection, refusals, the build command it runs.

No real build happens here (no container engine runs on CI machines): engines are
simulated with small scripts on a PATH that holds nothing else.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from scripts.image import ImageError, parse_dockerfile

REPO_ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
GOOD_DIGEST = "sha256:" + "0123456789abcdef" * 4


def run_image(tmp_path: Path, path_dirs: list[Path], *args: str, **env: str) -> subprocess.CompletedProcess:
    """`python -m scripts.image` with PATH = only the given dirs (the interpreter is absolute)."""
    environment = {k: v for k, v in os.environ.items() if k not in ("IMAGE", "BASE_DIGEST", "CONTAINER_ENGINE", "VARIANT", "PUSH")}
    environment["PATH"] = os.pathsep.join(str(d) for d in path_dirs)
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-m", "scripts.image", *args],
        cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=60,
    )


def fake_engine(bin_dir: Path, name: str, info_rc: int, build_rc: int = 0, push_rc: int = 0) -> Path:
    """An engine stand-in that logs its arguments; `info`, `build` and `push` exit as told."""
    bin_dir.mkdir(exist_ok=True)
    log = bin_dir / f"{name}.log"
    script = bin_dir / name
    script.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        echo "$@" >> {log}
        if [ "$1" = info ]; then
          [ {info_rc} -eq 0 ] || echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2
          exit {info_rc}
        fi
        [ "$1" = push ] && exit {push_rc}
        exit {build_rc}
        """))
    script.chmod(0o755)
    return log


def assert_one_line_refusal(result: subprocess.CompletedProcess, code: int) -> str:
    assert result.returncode == code, result
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_no_engine_on_path_is_one_line_with_the_fix(tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    line = assert_one_line_refusal(run_image(tmp_path, [empty]), 3)
    assert "no container engine" in line and "docker" in line and "podman" in line and "install" in line


def test_requested_engine_missing_names_it(tmp_path):
    bin_dir = tmp_path / "bin"
    fake_engine(bin_dir, "docker", info_rc=0)
    line = assert_one_line_refusal(run_image(tmp_path, [bin_dir], "--engine", "podman"), 3)
    assert "'podman' not found" in line


def test_client_without_daemon_is_one_line_with_the_fix(tmp_path):
    bin_dir = tmp_path / "bin"
    log = fake_engine(bin_dir, "docker", info_rc=1)
    line = assert_one_line_refusal(run_image(tmp_path, [bin_dir]), 3)
    assert "docker is installed but its engine does not answer" in line
    assert "Cannot connect to the Docker daemon" in line and "DOCKER_HOST" in line
    assert "build" not in log.read_text()


@pytest.mark.skipif(shutil.which("docker") is None, reason="no docker client installed on this machine")
def test_real_docker_client_without_daemon(tmp_path):
    # DOCKER_HOST at a socket that cannot exist: never talks to a daemon, even if one runs.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").symlink_to(shutil.which("docker"))
    result = run_image(tmp_path, [bin_dir], DOCKER_HOST=f"unix://{tmp_path}/no-daemon.sock")
    line = assert_one_line_refusal(result, 3)
    assert "docker is installed but its engine does not answer" in line


def test_podman_is_used_when_docker_is_absent(tmp_path):
    bin_dir = tmp_path / "bin"
    log = fake_engine(bin_dir, "podman", info_rc=0)
    result = run_image(tmp_path, [bin_dir])
    assert result.returncode == 0, result.stderr
    assert f"build --file {REPO_ROOT / 'Dockerfile'} --tag tf-multiworker:{VERSION}" in log.read_text()


def test_build_with_no_arguments_builds_the_gpu_variant_unpinned(tmp_path):
    # A clean clone builds with no build arguments: no digest to fill in first.
    bin_dir = tmp_path / "bin"
    log = fake_engine(bin_dir, "docker", info_rc=0)
    result = run_image(tmp_path, [bin_dir])
    assert result.returncode == 0, result.stderr
    build = [l for l in log.read_text().splitlines() if l.startswith("build ")]
    assert build == [
        f"build --file {REPO_ROOT / 'Dockerfile'} --tag tf-multiworker:{VERSION} "
        f"--build-arg VERSION={VERSION} --build-arg VARIANT=gpu {REPO_ROOT}"
    ]
    assert f"built tf-multiworker:{VERSION} (base docker.io/library/python:3.11-slim-bookworm, not pinned" in result.stdout
    assert "push" not in log.read_text()


def test_base_digest_is_passed_as_a_build_argument_when_given(tmp_path):
    bin_dir = tmp_path / "bin"
    log = fake_engine(bin_dir, "docker", info_rc=0)
    result = run_image(tmp_path, [bin_dir], BASE_DIGEST=GOOD_DIGEST)
    assert result.returncode == 0, result.stderr
    assert f"--build-arg VARIANT=gpu --build-arg BASE_DIGEST={GOOD_DIGEST} {REPO_ROOT}" in log.read_text()
    assert f"base pinned to {GOOD_DIGEST}" in result.stdout


@pytest.mark.parametrize("variant, image, expected", [
    ("cpu", None, f"tf-multiworker:{VERSION}-cpu"),
    ("gpu", None, f"tf-multiworker:{VERSION}"),
    ("cpu", "registry.example:5000/ml/tfmw", f"registry.example:5000/ml/tfmw:{VERSION}-cpu"),
    ("gpu", "registry.example:5000/ml/tfmw", f"registry.example:5000/ml/tfmw:{VERSION}"),
    ("cpu", "registry.example/ml/tfmw:exp-1", "registry.example/ml/tfmw:exp-1"),
])
def test_variant_selects_the_lock_and_the_tag_suffix(tmp_path, variant, image, expected):
    bin_dir = tmp_path / "bin"
    log = fake_engine(bin_dir, "docker", info_rc=0)
    env = {"VARIANT": variant} | ({"IMAGE": image} if image else {})
    result = run_image(tmp_path, [bin_dir], **env)
    assert result.returncode == 0, result.stderr
    assert f"--tag {expected} --build-arg VERSION={VERSION} --build-arg VARIANT={variant} " in log.read_text()


def test_unknown_variant_is_refused_before_building(tmp_path):
    bin_dir = tmp_path / "bin"
    log = fake_engine(bin_dir, "docker", info_rc=0)
    line = assert_one_line_refusal(run_image(tmp_path, [bin_dir], VARIANT="tpu"), 2)
    assert "VARIANT='tpu'" in line and "VARIANT=cpu" in line
    assert not log.exists() or "build" not in log.read_text()


def test_push_pushes_the_built_reference(tmp_path):
    bin_dir = tmp_path / "bin"
    log = fake_engine(bin_dir, "docker", info_rc=0)
    result = run_image(tmp_path, [bin_dir], "--push", IMAGE="registry.example/ml/tfmw", VARIANT="cpu")
    assert result.returncode == 0, result.stderr
    lines = log.read_text().splitlines()
    assert lines[-1] == f"push registry.example/ml/tfmw:{VERSION}-cpu"
    assert lines[-2].startswith("build ")
    assert f"pushed registry.example/ml/tfmw:{VERSION}-cpu" in result.stdout


def test_failed_push_passes_the_engine_exit_code_through(tmp_path):
    bin_dir = tmp_path / "bin"
    fake_engine(bin_dir, "docker", info_rc=0, push_rc=5)
    result = run_image(tmp_path, [bin_dir], PUSH="1")
    assert result.returncode == 5
    assert "docker push exited 5" in result.stderr and "Traceback" not in result.stderr


def test_image_env_overrides_the_tag(tmp_path):
    bin_dir = tmp_path / "bin"
    log = fake_engine(bin_dir, "docker", info_rc=0)
    result = run_image(tmp_path, [bin_dir], IMAGE="registry.example:5000/team/tfmw:exp-1")
    assert result.returncode == 0, result.stderr
    assert "--tag registry.example:5000/team/tfmw:exp-1 " in log.read_text()


def test_failed_build_passes_the_engine_exit_code_through(tmp_path):
    bin_dir = tmp_path / "bin"
    fake_engine(bin_dir, "docker", info_rc=0, build_rc=7)
    result = run_image(tmp_path, [bin_dir])
    assert result.returncode == 7
    assert "docker build exited 7" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("bad", ["sha256:abc", "md5:" + "0" * 32, "latest", "sha256:PLACEHOLDER"])
def test_malformed_digest_is_refused_before_building(tmp_path, bad):
    bin_dir = tmp_path / "bin"
    log = fake_engine(bin_dir, "docker", info_rc=0)
    line = assert_one_line_refusal(run_image(tmp_path, [bin_dir], BASE_DIGEST=bad), 2)
    assert f"BASE_DIGEST={bad!r}" in line and "sha256:<64 hex digits>" in line
    assert "docker buildx imagetools inspect docker.io/library/python:3.11-slim-bookworm" in line
    assert "build" not in log.read_text()


@pytest.mark.parametrize("bad", ["Tf-Multiworker:1", "tfmw:", "tfmw:bad tag", "-x"])
def test_bad_image_reference_is_refused(tmp_path, bad):
    line = assert_one_line_refusal(run_image(tmp_path, [tmp_path], "--dry-run", IMAGE=bad), 2)
    assert f"IMAGE={bad!r}" in line and "[registry/]name[:tag]" in line


def test_dry_run_prints_the_command_without_an_engine(tmp_path):
    result = run_image(tmp_path, [tmp_path], "--dry-run")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("image: docker build ")


def test_parser_joins_continuations_and_skips_comments_inside_them():
    parsed = parse_dockerfile(textwrap.dedent("""\
        # leading comment
        ARG A=1
        FROM base:${A}
        ARG A
        ENV X=1 \\
            # a comment inside a continued instruction
            Y="two words"
        RUN echo a \\
            && echo b
        USER 1000:1000
        ENTRYPOINT ["python", "-m", "entrypoint"]
        CMD ["run"]
        """))
    assert parsed.args == {"A": "1"}
    assert parsed.from_images == ["base:${A}"]
    assert parsed.env == {"X": "1", "Y": "two words"}
    assert parsed.run_commands == ["echo a && echo b"]
    assert parsed.user == "1000:1000"
    assert parsed.entrypoint == ["python", "-m", "entrypoint"] and parsed.cmd == ["run"]


def test_parser_refuses_shell_form_entrypoint():
    with pytest.raises(ImageError, match="ENTRYPOINT must be a JSON array"):
        parse_dockerfile("FROM x\nENTRYPOINT python -m entrypoint\n")
