"""`make image` (scripts/tfmw/image/build.py): engine detection, refusals, the build command it runs.

No real build happens here: engines are simulated with small scripts on a PATH that holds
nothing else (tests/lint/test_image_podman.py builds and runs the real image, slow).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
import yaml
from repo import REPO as REPO_ROOT

from tfmw.image import base as image_base
from tfmw.image import build as image
from tfmw.image import cli as image_cli
from tfmw.image.dockerfile import ImageError, parse_dockerfile

VERSION = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
GOOD_DIGEST = "sha256:" + "0123456789abcdef" * 4
# The chart's default image.repository: what `make image` tags by default.
REPOSITORY = yaml.safe_load((REPO_ROOT / "charts/tf-multiworker/values.yaml").read_text())["image"]["repository"]
DEFAULT_GPU = f"{REPOSITORY}:{VERSION}"
DEFAULT_CPU = f"{REPOSITORY}:{VERSION}-cpu"
CLEARED_ENV = (
    "IMAGE",
    "BASE_DIGEST",
    "CONTAINER_ENGINE",
    "VARIANT",
    "PUSH",
    "BASE",
    "BASE_IMAGE",
    "BASE_TAG",
    "CONTAINERS_CONF",
    "TFMW_IMAGE_STATE_DIR",
)


def run_image(tmp_path: Path, path_dirs: list[Path], *args: str, **env: str) -> subprocess.CompletedProcess:
    """`python -m tfmw.image` with PATH = only the given dirs (the interpreter is absolute)."""
    environment = {k: v for k, v in os.environ.items() if k not in CLEARED_ENV}
    environment["PATH"] = os.pathsep.join(str(d) for d in path_dirs)
    environment["TFMW_IMAGE_STATE_DIR"] = str(tmp_path / "state")  # never the real build's lock
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-m", "tfmw.image", *args],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )


def fake_engine(
    bin_dir: Path, name: str, info_rc: int, build_rc: int = 0, push_rc: int = 0, images: dict[str, dict] | None = None
) -> Path:
    """An engine stand-in that logs its arguments (and CONTAINERS_CONF to <name>.env).

    `info`, `build` and `push` exit as told; `image inspect REF` prints images[REF] as the
    engines do (a one-element JSON list) or fails like them for an unknown image; `save
    [--format F] --output FILE REF` writes FILE.
    """
    bin_dir.mkdir(exist_ok=True)
    log = bin_dir / f"{name}.log"
    store = bin_dir / f"{name}-images"
    store.mkdir(exist_ok=True)
    for ref, details in (images or {}).items():
        (store / ref.replace("/", "_")).write_text(json.dumps([details]))
    script = bin_dir / name
    script.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        echo "$@" >> {log}
        echo "$CONTAINERS_CONF" >> {bin_dir / f"{name}.env"}
        if [ "$1" = info ]; then
          [ {info_rc} -eq 0 ] || echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock." \
            "Is the docker daemon running?" >&2
          exit {info_rc}
        fi
        if [ "$1" = image ] && [ "$2" = inspect ]; then
          file="{store}/$(echo "$3" | {shutil.which("tr")} / _)"
          [ -f "$file" ] && exec {shutil.which("cat")} "$file"
          echo "[]"; echo "Error: $3: image not known" >&2; exit 125
        fi
        if [ "$1" = save ]; then
          while [ "$1" != --output ]; do shift; done
          echo archive > "$2"; exit 0
        fi
        [ "$1" = push ] && exit {push_rc}
        exit {build_rc}
        """)
    )
    script.chmod(0o755)
    return log


def builds(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith("build ")] if log.exists() else []


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
    assert "no container engine" in line and "docker" in line and "podman" in line
    assert "apt-get install podman" in line  # the package that provides it, by name


def test_requested_engine_missing_names_it(tmp_path):
    bin_dir = tmp_path / "bin"
    fake_engine(bin_dir, "docker", info_rc=0)
    line = assert_one_line_refusal(run_image(tmp_path, [bin_dir], "--engine", "podman"), 3)
    assert "'podman' not found" in line and "apt-get install podman" in line


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
    [build] = builds(log)
    assert build.startswith(f"build --file {REPO_ROOT / 'Dockerfile'} --tag {DEFAULT_GPU} ")
    # SHELL (pipefail) survives only in the docker format; RUN steps use the host's network.
    assert " --format docker --network host " in build
    if image.HOST_CA_BUNDLE.is_file():  # the host's CAs for pip, at build time only
        bundle = image.HOST_CA_BUNDLE
        assert f" --volume {bundle}:{bundle}:ro --build-arg PIP_CERT={bundle} " in build
    # Every podman call reads the project's containers.conf (ulimits, cgroupfs, runc).
    confs = set((bin_dir / "podman.env").read_text().split())
    assert confs == {str(REPO_ROOT / "scripts" / "tfmw" / "image" / "containers.conf")}


def test_podman_is_used_when_docker_has_no_daemon(tmp_path):
    # This project's CI machines: a docker client, no daemon, and podman.
    bin_dir = tmp_path / "bin"
    docker_log = fake_engine(bin_dir, "docker", info_rc=1)
    podman_log = fake_engine(bin_dir, "podman", info_rc=0)
    result = run_image(tmp_path, [bin_dir])
    assert result.returncode == 0, result.stderr
    assert builds(docker_log) == [] and len(builds(podman_log)) == 1


def test_a_users_containers_conf_wins(tmp_path):
    bin_dir = tmp_path / "bin"
    fake_engine(bin_dir, "podman", info_rc=0)
    result = run_image(tmp_path, [bin_dir], CONTAINERS_CONF="/etc/mine.conf")
    assert result.returncode == 0, result.stderr
    assert set((bin_dir / "podman.env").read_text().split()) == {"/etc/mine.conf"}


def test_the_project_containers_conf_keeps_podman_within_this_machines_limits():
    conf = tomllib.loads((REPO_ROOT / "scripts" / "tfmw" / "image" / "containers.conf").read_text())
    for ulimit in conf["containers"]["default_ulimits"]:
        name, _, limits = ulimit.partition("=")
        assert name in ("nofile", "nproc") and all(int(v) <= 16384 for v in limits.split(":")), ulimit
    assert conf["engine"]["cgroup_manager"] == "cgroupfs" and conf["engine"]["events_logger"] == "file"
    assert conf["engine"]["runtime"] == "runc"  # crun refuses hybrid cgroup v1


def test_build_with_no_arguments_builds_the_gpu_variant_unpinned(tmp_path):
    # A clean clone builds with no build arguments: no digest to fill in first.
    bin_dir = tmp_path / "bin"
    log = fake_engine(bin_dir, "docker", info_rc=0)
    result = run_image(tmp_path, [bin_dir])
    assert result.returncode == 0, result.stderr
    [build] = builds(log)
    digest = image.source_digest(
        REPO_ROOT,
        image.read_dockerfile(REPO_ROOT / "Dockerfile"),
        REPO_ROOT / "Dockerfile",
        "gpu",
        "docker.io/library/python:3.11-slim-bookworm",
    )
    assert build == (
        f"build --file {REPO_ROOT / 'Dockerfile'} --tag {DEFAULT_GPU} "
        f"--build-arg VERSION={VERSION} --build-arg VARIANT=gpu --label tfmw.source-digest={digest} {REPO_ROOT}"
    )  # docker: no podman-only flags
    assert f"built {DEFAULT_GPU} (base docker.io/library/python:3.11-slim-bookworm, not pinned" in result.stdout
    assert "push" not in log.read_text()


def test_base_digest_is_passed_as_a_build_argument_when_given(tmp_path):
    bin_dir = tmp_path / "bin"
    log = fake_engine(bin_dir, "docker", info_rc=0)
    result = run_image(tmp_path, [bin_dir], BASE_DIGEST=GOOD_DIGEST)
    assert result.returncode == 0, result.stderr
    assert f"--build-arg VARIANT=gpu --build-arg BASE_DIGEST={GOOD_DIGEST} --label " in log.read_text()
    assert f"base docker.io/library/python:3.11-slim-bookworm pinned to {GOOD_DIGEST}" in result.stdout


@pytest.mark.parametrize(
    "variant, image, expected",
    [
        ("cpu", None, DEFAULT_CPU),
        ("gpu", None, DEFAULT_GPU),
        ("cpu", "registry.example:5000/ml/tfmw", f"registry.example:5000/ml/tfmw:{VERSION}-cpu"),
        ("gpu", "registry.example:5000/ml/tfmw", f"registry.example:5000/ml/tfmw:{VERSION}"),
        ("cpu", "registry.example/ml/tfmw:exp-1", "registry.example/ml/tfmw:exp-1"),
    ],
)
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
    lines = [line for line in log.read_text().splitlines() if not line.startswith(("info", "image inspect"))]
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
    assert builds(log) == []


@pytest.mark.parametrize("bad", ["Tf-Multiworker:1", "tfmw:", "tfmw:bad tag", "-x"])
def test_bad_image_reference_is_refused(tmp_path, bad):
    line = assert_one_line_refusal(run_image(tmp_path, [tmp_path], "--dry-run", IMAGE=bad), 2)
    assert f"IMAGE={bad!r}" in line and "[registry/]name[:tag]" in line


def test_dry_run_prints_the_command_without_an_engine(tmp_path):
    result = run_image(tmp_path, [tmp_path], "--dry-run")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("image: docker build ")


def test_parser_joins_continuations_and_skips_comments_inside_them():
    parsed = parse_dockerfile(
        textwrap.dedent("""\
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
        """)
    )
    assert parsed.args == {"A": "1"}
    assert parsed.from_images == ["base:${A}"]
    assert parsed.env == {"X": "1", "Y": "two words"}
    assert parsed.run_commands == ["echo a && echo b"]
    assert parsed.user == "1000:1000"
    assert parsed.entrypoint == ["python", "-m", "entrypoint"] and parsed.cmd == ["run"]


def test_parser_records_each_instruction_it_knows_and_skips_the_rest():
    parsed = parse_dockerfile(
        textwrap.dedent("""\
        from base
        label a=1 "b"="two words"
        ENV LEGACY value with spaces
        WORKDIR /app
        COPY --chown=1000 src/ pyproject.toml /app/
        ADD extra.tar /opt/
        EXPOSE 8080
        HEALTHCHECK NONE
        """)
    )
    assert parsed.from_images == ["base"]
    assert parsed.labels == {"a": "1", "b": "two words"}
    assert parsed.env == {"LEGACY": "value with spaces"}
    assert parsed.workdir == "/app"
    assert parsed.copy_sources == ["src/", "pyproject.toml", "extra.tar"]
    assert parsed.run_commands == [] and parsed.user is None and parsed.entrypoint is None


def test_parser_refuses_shell_form_entrypoint():
    with pytest.raises(ImageError, match="ENTRYPOINT must be a JSON array"):
        parse_dockerfile("FROM x\nENTRYPOINT python -m entrypoint\n")


# ---------------------------------------------------------------- up to date: the source digest


def current_digest(variant: str, base: str) -> str:
    dockerfile = REPO_ROOT / "Dockerfile"
    return image.source_digest(REPO_ROOT, image.read_dockerfile(dockerfile), dockerfile, variant, base)


OFFICIAL = "docker.io/library/python:3.11-slim-bookworm"


def test_an_image_with_the_current_source_digest_is_not_built_again(tmp_path):
    bin_dir = tmp_path / "bin"
    labels = {"tfmw.source-digest": current_digest("cpu", OFFICIAL)}
    present = {DEFAULT_CPU: {"Id": "ab" * 32, "Config": {"Labels": labels}}}
    log = fake_engine(bin_dir, "podman", info_rc=0, images=present)
    result = run_image(tmp_path, [bin_dir], VARIANT="cpu")
    assert result.returncode == 0, result.stderr
    assert builds(log) == []
    assert f"image: {DEFAULT_CPU} is up to date" in result.stdout
    # --rebuild builds anyway; another variant or base is another key.
    assert run_image(tmp_path, [bin_dir], "--rebuild", VARIANT="cpu").returncode == 0
    assert len(builds(log)) == 1
    assert current_digest("cpu", OFFICIAL) not in {current_digest("gpu", OFFICIAL), current_digest("cpu", "x:y")}


def test_a_stale_label_builds(tmp_path):
    bin_dir = tmp_path / "bin"
    stale = {DEFAULT_CPU: {"Id": "ab" * 32, "Config": {"Labels": {"tfmw.source-digest": "0" * 64}}}}
    log = fake_engine(bin_dir, "podman", info_rc=0, images=stale)
    result = run_image(tmp_path, [bin_dir], VARIANT="cpu")
    assert result.returncode == 0, result.stderr
    [build] = builds(log)
    assert f"--label tfmw.source-digest={current_digest('cpu', OFFICIAL)}" in build


def make_context(tmp_path: Path) -> Path:
    """A copy of what the build reads (Dockerfile, .dockerignore, COPY sources)."""
    context = tmp_path / "context"
    (context / "requirements").mkdir(parents=True)
    for name in (
        "Dockerfile",
        ".dockerignore",
        "pyproject.toml",
        "README.md",
        "requirements/image-cpu.lock",
        "requirements/image-gpu.lock",
    ):
        shutil.copy(REPO_ROOT / name, context / name)
    shutil.copytree(
        REPO_ROOT / "entrypoint", context / "entrypoint", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    return context


def append(path: Path) -> None:
    with open(path, "a") as file:
        file.write("# changed\n")


def context_digest(context: Path, variant: str = "cpu") -> str:
    return image.source_digest(
        context, image.read_dockerfile(context / "Dockerfile"), context / "Dockerfile", variant, OFFICIAL
    )


def test_source_digest_follows_what_the_build_copies_and_not_what_dockerignore_drops(tmp_path):
    context = make_context(tmp_path)
    before = context_digest(context)
    # Ignored by .dockerignore (never in the build context): no change.
    (context / "entrypoint" / "__pycache__").mkdir()
    (context / "entrypoint" / "__pycache__" / "cli.cpython-311.pyc").write_bytes(b"\0")
    (context / "entrypoint" / "stale.pyc").write_bytes(b"\0")
    (context / "tests").mkdir()
    (context / "tests" / "test_x.py").write_text("")
    (context / "requirements" / "image-cpu.in").write_text("x\n")
    assert context_digest(context) == before
    relative = [
        name
        for name, _ in image.source_files(
            context, image.read_dockerfile(context / "Dockerfile"), context / "Dockerfile", "cpu"
        )
    ]
    assert "entrypoint/__main__.py" in relative and not any(n.endswith(".pyc") for n in relative)
    assert "requirements/image-cpu.lock" in relative and "requirements/image-gpu.lock" not in relative
    # Each file the build copies changes it: the launcher, a new module, the lock, the Dockerfile.
    for change in (
        lambda: append(context / "entrypoint" / "cli.py"),
        lambda: (context / "entrypoint" / "new_module.py").write_text(""),
        lambda: append(context / "requirements" / "image-cpu.lock"),
        lambda: append(context / "README.md"),
        lambda: append(context / "Dockerfile"),
    ):
        before = context_digest(context)
        change()
        assert context_digest(context) != before
    # The GPU lock is not part of the CPU image.
    before = context_digest(context)
    append(context / "requirements" / "image-gpu.lock")
    assert context_digest(context) == before


@pytest.mark.parametrize(
    "pattern, path, ignored",
    [
        ("**/__pycache__", "entrypoint/training/__pycache__/x.pyc", True),
        ("**/*.pyc", "entrypoint/a.pyc", True),
        ("*", "entrypoint/a.py", True),
        ("entrypoint/*.py", "entrypoint/a.py", True),
        ("entrypoint/*.py", "entrypoint/training/a.py", False),
        ("/docs", "docs/x.md", True),
    ],
)
def test_dockerignore_patterns_match_as_docker_does(tmp_path, pattern, path, ignored):
    (tmp_path / ".dockerignore").write_text(pattern + "\n")
    assert image.dockerignored(path, image.dockerignore_rules(tmp_path)) is ignored


def test_a_file_the_dockerfile_copies_that_is_missing_is_one_line(tmp_path):
    context = make_context(tmp_path)
    (context / "README.md").unlink()
    with pytest.raises(ImageError, match="copies README.md, which does not exist"):
        context_digest(context)


# ---------------------------------------------------------------- BASE, BASE_IMAGE, BASE_TAG


def test_base_image_and_tag_are_passed_through(tmp_path):
    bin_dir = tmp_path / "bin"
    log = fake_engine(bin_dir, "podman", info_rc=0)
    result = run_image(tmp_path, [bin_dir], BASE_IMAGE="registry.example/mirror/python", BASE_TAG="3.11-slim-bookworm")
    assert result.returncode == 0, result.stderr
    [build] = builds(log)
    assert " --build-arg BASE_IMAGE=registry.example/mirror/python --build-arg BASE_TAG=3.11-slim-bookworm " in build
    assert "base registry.example/mirror/python:3.11-slim-bookworm, not pinned" in result.stdout


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"BASE": "alpine"}, "BASE='alpine' is not one of official, debian"),
        ({"BASE": "debian", "BASE_TAG": "3.11"}, "BASE=debian builds its own base, so BASE_TAG cannot apply"),
        ({"BASE": "debian", "BASE_DIGEST": GOOD_DIGEST}, "so BASE_DIGEST cannot apply"),
        ({"BASE_IMAGE": "python:3.11"}, "BASE_IMAGE='python:3.11' is not an image repository"),
        ({"BASE_TAG": "3.11 slim"}, "BASE_TAG='3.11 slim' is not a valid tag"),
    ],
)
def test_bad_base_choices_are_refused_before_building(tmp_path, env, expected):
    bin_dir = tmp_path / "bin"
    log = fake_engine(bin_dir, "podman", info_rc=0)
    line = assert_one_line_refusal(run_image(tmp_path, [bin_dir], **env), 2)
    assert expected in line
    assert builds(log) == []


def test_debian_base_present_is_reused_without_debootstrap(tmp_path):
    # No debootstrap on this PATH: the existing base tag is all it needs.
    bin_dir = tmp_path / "bin"
    base_image, base_tag = image_base.base_image_and_tag()
    log = fake_engine(bin_dir, "podman", info_rc=0, images={f"{base_image}:{base_tag}": {"Id": "cd" * 32}})
    result = run_image(tmp_path, [bin_dir], BASE="debian", VARIANT="cpu")
    assert result.returncode == 0, result.stderr
    [build] = builds(log)
    assert f" --build-arg BASE_IMAGE={base_image} --build-arg BASE_TAG={base_tag} " in build
    assert "import" not in log.read_text()
    assert f"image: base {base_image}:{base_tag} (Debian bookworm, already built)" in result.stdout
    assert base_tag.startswith("python3.11-bookworm-") and base_image == "localhost/tfmw-base"


def test_debian_base_without_debootstrap_is_one_line_naming_the_package(tmp_path):
    bin_dir = tmp_path / "bin"
    log = fake_engine(bin_dir, "podman", info_rc=0)
    line = assert_one_line_refusal(run_image(tmp_path, [bin_dir], BASE="debian"), 4)
    assert "BASE=debian needs debootstrap" in line and "apt-get install debootstrap" in line
    assert builds(log) == [] and "import" not in log.read_text()


def in_process_main(monkeypatch, capsys, bin_dir: Path, tmp_path: Path, *args: str) -> tuple[int, str, str]:
    for name in CLEARED_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("TFMW_IMAGE_STATE_DIR", str(tmp_path / "state"))
    code = image_cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_debian_base_not_as_root_is_one_line(tmp_path, monkeypatch, capsys):
    bin_dir = tmp_path / "bin"
    log = fake_engine(bin_dir, "podman", info_rc=0)
    (bin_dir / "debootstrap").write_text("#!/bin/sh\nexit 99\n")
    (bin_dir / "debootstrap").chmod(0o755)
    monkeypatch.setattr(image_base.os, "geteuid", lambda: 1000)
    code, _, err = in_process_main(monkeypatch, capsys, bin_dir, tmp_path, "--base", "debian")
    assert code == 4 and len(err.strip().splitlines()) == 1
    assert "BASE=debian runs debootstrap, which needs root" in err and "sudo make image BASE=debian" in err
    assert builds(log) == []


def test_debian_base_without_the_archive_keyring_is_one_line(tmp_path, monkeypatch, capsys):
    bin_dir = tmp_path / "bin"
    fake_engine(bin_dir, "podman", info_rc=0)
    (bin_dir / "debootstrap").write_text("#!/bin/sh\nexit 99\n")
    (bin_dir / "debootstrap").chmod(0o755)
    monkeypatch.setattr(image_base.os, "geteuid", lambda: 0)
    monkeypatch.setattr(image_base, "KEYRING", tmp_path / "no-keyring.gpg")
    code, _, err = in_process_main(monkeypatch, capsys, bin_dir, tmp_path, "--base", "debian")
    assert code == 4 and len(err.strip().splitlines()) == 1
    assert "apt-get install debian-archive-keyring" in err


def test_a_failing_debootstrap_is_one_line_with_its_log(tmp_path, monkeypatch, capsys):
    bin_dir = tmp_path / "bin"
    fake_engine(bin_dir, "podman", info_rc=0)
    (bin_dir / "debootstrap").write_text(
        "#!/bin/sh\necho 'E: Failed getting release file http://deb.debian.org/debian/dists/bookworm/Release'\nexit 1\n"
    )
    (bin_dir / "debootstrap").chmod(0o755)
    monkeypatch.setattr(image_base.os, "geteuid", lambda: 0)
    code, _, err = in_process_main(monkeypatch, capsys, bin_dir, tmp_path, "--base", "debian")
    assert code == 4 and len(err.strip().splitlines()) == 1
    assert "debootstrap exited 1 (E: Failed getting release file" in err and "debootstrap.log" in err
    assert not any(p.name.startswith("base-rootfs-") for p in (tmp_path / "state").iterdir())  # scratch tree gone


def test_dry_run_with_the_debian_base_prints_debootstrap_and_import(tmp_path):
    result = run_image(tmp_path, [tmp_path], "--dry-run", "--engine", "podman", BASE="debian")
    assert result.returncode == 0, result.stderr
    base_line, build_line = result.stdout.strip().splitlines()
    assert "debootstrap --variant=minbase --keyring=/usr/share/keyrings/debian-archive-keyring.gpg" in base_line
    for package in ("python3", "python3-pip", "python-is-python3", "ca-certificates", "bash", "passwd", "libc-bin"):
        assert package in base_line.split("--include=")[1].split()[0].split(",")
    assert "podman import --change" in base_line and image_base.reference() in base_line
    assert build_line.startswith("image: podman build ") and " --format docker " in build_line


def test_base_tag_follows_the_recipe(monkeypatch):
    before = image_base.reference()
    monkeypatch.setattr(image_base, "PACKAGES", image_base.PACKAGES + ("curl",))
    assert image_base.reference() != before


def test_trim_never_follows_a_symlink_out_of_the_tree(tmp_path):
    outside = tmp_path / "host-doc" / "pkg"
    outside.mkdir(parents=True)
    (outside / "README").write_text("host file")
    root = tmp_path / "root"
    doc = root / "usr/share/doc"
    (doc / "python3").mkdir(parents=True)
    (doc / "python3" / "README.gz").write_text("")
    (doc / "python3" / "copyright").write_text("")
    (doc / "escape").symlink_to(outside)  # an absolute link to the "host"
    (root / "usr/lib/python3.11").mkdir(parents=True)
    (root / "usr/lib/python3.11/EXTERNALLY-MANAGED").write_text("")
    (root / "etc").mkdir()
    (root / "etc/resolv.conf").write_text("nameserver 10.0.0.1\n")
    image_base.trim(root)
    assert (outside / "README").read_text() == "host file"
    assert not (doc / "python3" / "README.gz").exists() and (doc / "python3" / "copyright").exists()
    assert not (root / "usr/lib/python3.11/EXTERNALLY-MANAGED").exists()
    assert (root / "etc/resolv.conf").read_text() == ""


# ---------------------------------------------------------------- ensure_image / save_archive (the API)


def test_ensure_image_refusals_raise_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ImageError) as error:
        image.ensure_image("cpu", "official", progress=lambda line: None)
    assert error.value.exit_code == 3 and "\n" not in str(error.value)
    with pytest.raises(ImageError, match="VARIANT='tpu'"):
        image.ensure_image("tpu", "official", progress=lambda line: None)
    with pytest.raises(ImageError, match="BASE='ubuntu'"):
        image.ensure_image("cpu", "ubuntu", progress=lambda line: None)


def test_ensure_image_failure_is_one_line_with_the_log(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    fake_engine(bin_dir, "podman", info_rc=0, build_rc=125)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("TFMW_IMAGE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("CONTAINERS_CONF", raising=False)
    lines: list[str] = []
    with pytest.raises(ImageError) as error:
        image.ensure_image("cpu", "official", progress=lines.append)
    assert error.value.exit_code == 125 and "\n" not in str(error.value)
    assert "podman build exited 125" in str(error.value)
    assert str(tmp_path / "state" / "build-cpu.log") in str(error.value)
    assert any(line.startswith(f"image: building {DEFAULT_CPU} with podman (one-time, ~4 min") for line in lines)


def test_ensure_image_returns_the_reference_the_chart_pulls(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    log = fake_engine(bin_dir, "podman", info_rc=0)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("TFMW_IMAGE_STATE_DIR", str(tmp_path / "state"))
    assert image.ensure_image("cpu", "official", progress=lambda line: None) == DEFAULT_CPU
    assert image.ensure_image("gpu", "official", progress=lambda line: None) == DEFAULT_GPU
    assert len(builds(log)) == 2


def test_save_archive_names_the_file_by_ref_and_id_and_keeps_it(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    old_id, new_id = "12" * 32, "34" * 32
    log = fake_engine(bin_dir, "podman", info_rc=0, images={DEFAULT_CPU: {"Id": new_id}})
    monkeypatch.setenv("PATH", str(bin_dir))
    dest = tmp_path / "archives"
    dest.mkdir()
    stale = dest / image.archive_name(DEFAULT_CPU, old_id[:12])
    stale.write_text("old")
    other = dest / image.archive_name(DEFAULT_GPU, old_id[:12])
    other.write_text("another ref")
    path = image.save_archive(DEFAULT_CPU, dest, progress=lambda line: None)
    assert path == dest / f"ghcr.io_tf-multiworker_tf-multiworker_{VERSION}-cpu-{new_id[:12]}.tar"
    assert path.read_text() == "archive\n"
    assert f"save --format docker-archive --output {path}.partial {DEFAULT_CPU}" in log.read_text()
    assert not stale.exists() and other.exists()  # the ref's older archive goes, another ref's stays
    saves = log.read_text().count("save ")
    assert image.save_archive(DEFAULT_CPU, dest, progress=lambda line: None) == path
    assert log.read_text().count("save ") == saves  # present: not saved again


def test_save_archive_of_a_missing_image_is_one_line(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    fake_engine(bin_dir, "podman", info_rc=0)
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(ImageError, match=f"podman has no image {DEFAULT_CPU}; build it first"):
        image.save_archive(DEFAULT_CPU, tmp_path, progress=lambda line: None)


def test_save_archive_failure_leaves_no_partial_file(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    fake_engine(bin_dir, "podman", info_rc=0, images={DEFAULT_CPU: {"Id": "56" * 32}})
    script = bin_dir / "podman"
    script.write_text(
        script.read_text().replace(
            'echo archive > "$2"; exit 0', 'echo partial > "$2"; echo "Error: no space left on device" >&2; exit 125'
        )
    )
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(ImageError) as error:
        image.save_archive(DEFAULT_CPU, tmp_path / "a", progress=lambda line: None)
    assert "podman save exited 125: Error: no space left on device" == str(error.value)
    assert list((tmp_path / "a").iterdir()) == []


def test_a_podman_push_takes_the_registrys_ca_and_writes_the_digest(tmp_path):
    digest = tmp_path / "digest"
    assert image.push_command("/usr/bin/podman", "r:5000/x:1", "/ca", digest) == [
        "/usr/bin/podman",
        "push",
        "--cert-dir",
        "/ca",
        "--digestfile",
        str(digest),
        "r:5000/x:1",
    ]
    assert image.push_command("docker", "r:5000/x:1", None, digest) == ["docker", "push", "r:5000/x:1"]
    with pytest.raises(ImageError, match="--cert-dir/PUSH_CERT_DIR is podman's"):
        image.push_command("docker", "r:5000/x:1", "/ca", digest)
