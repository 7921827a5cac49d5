"""Build the worker image with docker or podman: `make image` / `python -m scripts.image`.

Runs with the bootstrap interpreter (no venv needed), so it uses the standard library only.

    python -m scripts.image [--variant gpu|cpu] [--image [REGISTRY/]NAME[:TAG]]
                            [--engine docker|podman] [--base-digest sha256:...] [--push] [--dry-run]

VARIANT gpu (default) installs tensorflow[and-cuda], cpu installs tensorflow-cpu, each from its
hash lock (requirements/image-<variant>.lock). The image is tagged `<version>` (gpu) or
`<version>-cpu` (cpu), version from pyproject.toml; IMAGE names the repository (that tag is
added) or the full reference. BASE_DIGEST (or --base-digest) pins the base image's digest;
without it the Dockerfile's base tag is used. Every refusal is one line on stderr and a
non-zero exit, never a traceback.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
IMAGE_NAME = "tf-multiworker"
ENGINES = ("docker", "podman")
VARIANTS = ("gpu", "cpu")  # the Dockerfile's VARIANT build argument; one lock file each
DIGEST_PATTERN = re.compile(r"^sha256:[0-9a-f]{64}$")
# A reference as `docker build -t` accepts it: [registry[:port]/]path[:tag]
IMAGE_REF_PATTERN = re.compile(
    r"^(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$"
)
DAEMON_CHECK_TIMEOUT_SECONDS = 30

EXIT_USAGE = 2  # bad input: fix the argument / environment
EXIT_NO_ENGINE = 3  # no usable container engine on this machine


class ImageError(Exception):
    """A refusal: one line for the user, and the exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE):
        super().__init__(message)
        self.exit_code = exit_code


# ---------------------------------------------------------------- Dockerfile parsing


@dataclass
class Dockerfile:
    """The parts of a Dockerfile other tools check (last stage wins, like docker)."""

    args: dict[str, str | None] = field(default_factory=dict)  # ARG name -> default
    from_images: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    workdir: str | None = None
    entrypoint: list[str] | None = None
    cmd: list[str] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    copy_sources: list[str] = field(default_factory=list)
    run_commands: list[str] = field(default_factory=list)


def logical_lines(text: str) -> list[str]:
    """Dockerfile instructions with continuations joined and comment lines dropped."""
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not current):
            continue  # comments may sit inside a continued instruction, too
        if stripped.endswith("\\"):
            current += stripped[:-1].rstrip() + " "
            continue
        current += stripped
        if current.strip():
            lines.append(current.strip())
        current = ""
    if current.strip():
        lines.append(current.strip())
    return lines


def _key_values(text: str) -> dict[str, str]:
    """`k=v k2="v 2"` (ENV / LABEL / ARG syntax) -> dict."""
    pairs: dict[str, str] = {}
    for token in shlex.split(text):
        key, _, value = token.partition("=")
        pairs[key] = value
    return pairs


def _exec_form(text: str, instruction: str) -> list[str]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ImageError(f"Dockerfile: {instruction} must be a JSON array of strings (exec form), got {text}")
    return value


def parse_dockerfile(text: str) -> Dockerfile:
    parsed = Dockerfile()
    for line in logical_lines(text):
        instruction, _, rest = line.partition(" ")
        instruction, rest = instruction.upper(), rest.strip()
        if instruction == "ARG":
            name, sep, default = rest.partition("=")
            if sep or name not in parsed.args:  # a bare re-declaration keeps the default
                parsed.args[name] = default if sep else None
        elif instruction == "FROM":
            parsed.from_images.append(rest.split()[0])
        elif instruction == "ENV":
            name, _, legacy_value = rest.partition(" ")
            if "=" not in name:  # the legacy form `ENV <key> <value with spaces>`
                parsed.env[name] = legacy_value.strip()
            else:
                parsed.env.update(_key_values(rest))
        elif instruction == "LABEL":
            parsed.labels.update(_key_values(rest))
        elif instruction == "USER":
            parsed.user = rest
        elif instruction == "WORKDIR":
            parsed.workdir = rest
        elif instruction == "ENTRYPOINT":
            parsed.entrypoint = _exec_form(rest, "ENTRYPOINT")
        elif instruction == "CMD":
            parsed.cmd = _exec_form(rest, "CMD")
        elif instruction in ("COPY", "ADD"):
            words = [w for w in shlex.split(rest) if not w.startswith("--")]
            parsed.copy_sources.extend(words[:-1])
        elif instruction == "RUN":
            parsed.run_commands.append(rest)
    return parsed


def read_dockerfile(path: Path) -> Dockerfile:
    try:
        return parse_dockerfile(path.read_text())
    except FileNotFoundError:
        raise ImageError(f"no Dockerfile at {path}; run from the repository root or pass --dockerfile") from None


# ---------------------------------------------------------------- build plan


def project_version(pyproject: Path) -> str:
    try:
        return tomllib.loads(pyproject.read_text())["project"]["version"]
    except (OSError, tomllib.TOMLDecodeError, KeyError) as error:
        raise ImageError(f"cannot read project.version from {pyproject} ({error}); fix pyproject.toml") from None


def check_image_ref(image: str) -> str:
    if not IMAGE_REF_PATTERN.match(image):
        raise ImageError(
            f"IMAGE={image!r} is not a valid image reference; use [registry/]name[:tag] "
            f"with a lowercase name, e.g. {IMAGE_NAME}:0.1.0"
        )
    return image


def variant_tag(version: str, variant: str) -> str:
    """The tag a variant's image gets: `<version>` for gpu, `<version>-cpu` for cpu.

    The chart picks the same suffix when image.tag is empty (templates/_helpers.tpl).
    """
    if variant not in VARIANTS:
        raise ImageError(f"VARIANT={variant!r} is not one of {', '.join(VARIANTS)}; choose VARIANT=gpu or VARIANT=cpu")
    return version if variant == "gpu" else f"{version}-{variant}"


def image_reference(image: str | None, version: str, variant: str) -> str:
    """IMAGE as given when it carries a tag; else the repository (default tf-multiworker) + the variant's tag."""
    tag = variant_tag(version, variant)
    if not image:
        return check_image_ref(f"{IMAGE_NAME}:{tag}")
    check_image_ref(image)
    if ":" in image.rsplit("/", 1)[-1]:
        return image
    return check_image_ref(f"{image}:{tag}")


def base_reference(dockerfile: Dockerfile) -> str:
    """`image:tag` of the base as the Dockerfile's ARG defaults name it."""
    return f"{dockerfile.args.get('BASE_IMAGE') or '?'}:{dockerfile.args.get('BASE_TAG') or '?'}"


def check_base_digest(digest: str, base: str) -> str:
    """A base digest pin, when one is given, must be sha256:<64 hex> (docker checks the rest)."""
    if not DIGEST_PATTERN.match(digest):
        raise ImageError(
            f"BASE_DIGEST={digest!r} is not sha256:<64 hex digits>; look it up with "
            f"`docker buildx imagetools inspect {base}` (the Digest: line), or leave it unset"
        )
    return digest


def find_engine(requested: str | None) -> str:
    """Path of the container engine client: the requested one, else docker, else podman."""
    candidates = (requested,) if requested else ENGINES
    for name in candidates:
        path = shutil.which(name)
        if path:
            return path
    if requested:
        raise ImageError(
            f"container engine {requested!r} not found on PATH; install it or choose another with "
            f"--engine / CONTAINER_ENGINE ({' or '.join(ENGINES)})",
            EXIT_NO_ENGINE,
        )
    raise ImageError(
        "no container engine found (neither docker nor podman is on PATH); install Docker "
        "(https://docs.docker.com/engine/install/) or Podman, or run `make image` on a machine that has one",
        EXIT_NO_ENGINE,
    )


def check_engine_answers(engine: str) -> None:
    """A docker client without a reachable daemon cannot build: say so before trying."""
    name = Path(engine).name
    try:
        result = subprocess.run(
            [engine, "info"], capture_output=True, text=True, timeout=DAEMON_CHECK_TIMEOUT_SECONDS
        )
    except subprocess.TimeoutExpired:
        result = None
    except OSError as error:
        raise ImageError(f"cannot run {engine} ({error}); reinstall it", EXIT_NO_ENGINE) from None
    if result is not None and result.returncode == 0:
        return
    reason = "it did not answer within %ds" % DAEMON_CHECK_TIMEOUT_SECONDS
    if result is not None:
        lines = [l.strip() for l in (result.stderr or result.stdout).splitlines() if l.strip()]
        reason = lines[-1] if lines else f"`{name} info` exited {result.returncode}"
    if name == "podman":
        fix = "check `podman info` (rootless setup, storage) or use docker"
    else:
        fix = "start the daemon (e.g. `sudo systemctl start docker`), point DOCKER_HOST at one, or use podman"
    raise ImageError(f"{name} is installed but its engine does not answer ({reason}); {fix}", EXIT_NO_ENGINE)


def build_command(engine: str, image: str, version: str, variant: str, dockerfile: Path, context: Path,
                  base_digest: str | None) -> list[str]:
    command = [engine, "build", "--file", str(dockerfile), "--tag", image,
               "--build-arg", f"VERSION={version}", "--build-arg", f"VARIANT={variant}"]
    if base_digest:
        command += ["--build-arg", f"BASE_DIGEST={base_digest}"]
    return command + [str(context)]


# ---------------------------------------------------------------- CLI


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m scripts.image", description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default=os.environ.get("VARIANT") or "gpu",
                        help="gpu (tensorflow[and-cuda], default) or cpu (tensorflow-cpu); env VARIANT")
    parser.add_argument("--image", default=os.environ.get("IMAGE"),
                        help="[registry/]name[:tag] (default: env IMAGE, else tf-multiworker); without a tag, "
                             "<version> (gpu) or <version>-cpu (cpu) is added")
    parser.add_argument("--engine", default=os.environ.get("CONTAINER_ENGINE"), choices=ENGINES,
                        help="container engine (default: env CONTAINER_ENGINE, else docker, else podman)")
    parser.add_argument("--base-digest", default=os.environ.get("BASE_DIGEST"),
                        help="sha256 digest pinning the Python base image (default: env BASE_DIGEST, else unpinned)")
    parser.add_argument("--push", action="store_true", default=os.environ.get("PUSH") == "1",
                        help="push the image after building it (env PUSH=1)")
    parser.add_argument("--dockerfile", type=Path, default=REPO_ROOT / "Dockerfile")
    parser.add_argument("--context", type=Path, default=REPO_ROOT)
    parser.add_argument("--dry-run", action="store_true", help="print the build command instead of running it")
    return parser.parse_args(argv)


def run(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    version = project_version(args.context / "pyproject.toml")
    image = image_reference(args.image, version, args.variant)
    dockerfile = read_dockerfile(args.dockerfile)
    # The engine first: without one nothing else matters on this machine.
    if args.dry_run:
        engine = args.engine or ENGINES[0]
    else:
        engine = find_engine(args.engine)
        check_engine_answers(engine)
    digest = check_base_digest(args.base_digest, base_reference(dockerfile)) if args.base_digest else None
    command = build_command(engine, image, version, args.variant, args.dockerfile, args.context, digest)
    print("image: " + shlex.join(command), flush=True)
    if args.dry_run:
        return 0
    code = subprocess.run(command).returncode
    if code != 0:
        print(f"image: FAILED: {Path(engine).name} build exited {code} (its output is above)", file=sys.stderr)
        return code
    pinned = f"base pinned to {digest}" if digest else f"base {base_reference(dockerfile)}, not pinned by digest"
    print(f"image: built {image} ({pinned})")
    if args.push:
        push = [engine, "push", image]
        print("image: " + shlex.join(push), flush=True)
        code = subprocess.run(push).returncode
        if code != 0:
            print(f"image: FAILED: {Path(engine).name} push exited {code} (its output is above)", file=sys.stderr)
            return code
        print(f"image: pushed {image}")
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        return run(argv)
    except ImageError as error:
        print(f"image: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("image: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
