"""Build the worker image with docker or podman: what `make image` (`python -m tfmw.image`, its
command line in tfmw.image.cli) does.

Runs with the bootstrap interpreter (no venv needed), so it uses the standard library only.

VARIANT gpu (default) installs tensorflow[and-cuda], cpu installs tensorflow-cpu, each from its
hash lock (requirements/image-<variant>.lock). The image is the one the chart pulls by default:
the chart's image.repository (charts/tf-multiworker/values.yaml) with the tag `<version>` (gpu)
or `<version>-cpu` (cpu), version from pyproject.toml; IMAGE names another repository (that tag
is added) or the full reference. BASE=official (default) builds on docker.io/library/python
(BASE_IMAGE / BASE_TAG choose another, BASE_DIGEST pins it); BASE=debian first builds a
python:3.11-slim-bookworm stand-in from Debian packages (scripts/tfmw/image/base.py) for machines
that cannot pull it. An image whose `tfmw.source-digest` label matches the sources is not built
again (--rebuild forces it). Every refusal is one line on stderr and a non-zero exit, never a
traceback.

Called from Python (the local cluster imports the image into containerd):

    ref = ensure_image(variant="cpu", base="debian", progress=print)   # builds only if needed
    archive = save_archive(ref, dest_dir)                              # docker-archive .tar

Both raise ImageError (one line in str(error), exit_code) on a refusal or failure.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tfmw import REPO as REPO_ROOT
from tfmw.image import base as image_base
from tfmw.image.dockerfile import (
    EXIT_BASE,
    EXIT_NO_ENGINE,
    Dockerfile,
    ImageError,
    read_dockerfile,
)

IMAGE_NAME = "tf-multiworker"
CHART_VALUES = REPO_ROOT / "charts" / "tf-multiworker" / "values.yaml"
ENGINES = ("docker", "podman")
BASES = ("official", "debian")  # docker.io/library/python, or scripts/tfmw/image/base.py's Debian build
SOURCE_LABEL = "tfmw.source-digest"  # the content key of what the image was built from
# podman reads only this containers.conf for our own calls (ulimits, cgroupfs, runc: see the file).
CONTAINERS_CONF = REPO_ROOT / "scripts" / "tfmw" / "image" / "containers.conf"
# The host's CA bundle, mounted read-only into podman builds so pip trusts a TLS-re-signing proxy
# whose CA the host added; never copied into the image.
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# Build logs, the debootstrap scratch tree, the build lock, save_archive's default directory.
DEFAULT_STATE_DIR = REPO_ROOT / ".tools" / "image"
APT_PACKAGE = {"docker": "docker.io", "podman": "podman"}
VARIANTS = ("gpu", "cpu")  # the Dockerfile's VARIANT build argument; one lock file each
DIGEST_PATTERN = re.compile(r"^sha256:[0-9a-f]{64}$")
# A reference as `docker build -t` accepts it: [registry[:port]/]path[:tag]
IMAGE_REF_PATTERN = re.compile(
    r"^(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$"
)
DAEMON_CHECK_TIMEOUT_SECONDS = 30


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

    The chart picks the same suffix when image.tag is empty (templates/_pod.tpl, "tf-multiworker.image").
    """
    if variant not in VARIANTS:
        raise ImageError(f"VARIANT={variant!r} is not one of {', '.join(VARIANTS)}; choose VARIANT=gpu or VARIANT=cpu")
    return version if variant == "gpu" else f"{version}-{variant}"


def chart_repository(values: Path = CHART_VALUES) -> str:
    """`image.repository` of the chart's values.yaml (the image its pods pull by default).

    A few lines of parsing instead of a YAML library: this runs before the venv exists. It
    reads the top-level `image:` block's `repository:` scalar, quoted or not.
    """
    try:
        lines = values.read_text().splitlines()
    except OSError as error:
        raise ImageError(f"cannot read the chart's image.repository from {values} ({error.strerror})") from None
    in_image = False
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line[0].isspace():
            in_image = line.split("#", 1)[0].rstrip() == "image:"
            continue
        key, sep, value = line.strip().partition(":")
        if in_image and sep and key == "repository":
            value = value.split(" #", 1)[0].strip().strip("'\"")
            if value:
                return check_image_ref(value)
    raise ImageError(f"{values} has no image.repository; the chart needs one")


def image_reference(image: str | None, version: str, variant: str) -> str:
    """IMAGE as given when it carries a tag; else the repository (default: the chart's) + the variant's tag."""
    tag = variant_tag(version, variant)
    if not image:
        return check_image_ref(f"{chart_repository()}:{tag}")
    check_image_ref(image)
    if ":" in image.rsplit("/", 1)[-1]:
        return image
    return check_image_ref(f"{image}:{tag}")


def base_reference(dockerfile: Dockerfile, base_image: str | None = None, base_tag: str | None = None) -> str:
    """`image:tag` of the base: the given BASE_IMAGE/BASE_TAG, else the Dockerfile's ARG defaults."""
    image = base_image or dockerfile.args.get("BASE_IMAGE") or "?"
    return f"{image}:{base_tag or dockerfile.args.get('BASE_TAG') or '?'}"


def check_base_digest(digest: str, base: str) -> str:
    """A base digest pin, when one is given, must be sha256:<64 hex> (docker checks the rest)."""
    if not DIGEST_PATTERN.match(digest):
        raise ImageError(
            f"BASE_DIGEST={digest!r} is not sha256:<64 hex digits>; look it up with "
            f"`docker buildx imagetools inspect {base}` (the Digest: line), or leave it unset"
        )
    return digest


def check_base_choice(base: str, base_image: str | None, base_tag: str | None, base_digest: str | None) -> str:
    if base not in BASES:
        raise ImageError(
            f"BASE={base!r} is not one of {', '.join(BASES)}; leave it unset for the official "
            "python image or choose BASE=debian (built here from Debian packages)"
        )
    if base == "debian":
        given = [
            name
            for name, value in (("BASE_IMAGE", base_image), ("BASE_TAG", base_tag), ("BASE_DIGEST", base_digest))
            if value
        ]
        if given:
            raise ImageError(
                f"BASE=debian builds its own base, so {'/'.join(given)} cannot apply; "
                "drop one of them (BASE_IMAGE/BASE_TAG/BASE_DIGEST go with the official base)"
            )
    if base_image and (not IMAGE_REF_PATTERN.match(base_image) or ":" in base_image.rsplit("/", 1)[-1]):
        raise ImageError(
            f"BASE_IMAGE={base_image!r} is not an image repository ([registry/]name, no tag: the tag goes in BASE_TAG)"
        )
    if base_tag and not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", base_tag):
        raise ImageError(f"BASE_TAG={base_tag!r} is not a valid tag (letters, digits, _ . -)")
    return base


# ---------------------------------------------------------------- the container engine


def engine_env(engine: str) -> dict[str, str]:
    """The environment for one of our engine calls: podman reads the project's containers.conf.

    A CONTAINERS_CONF the user set wins (they chose their own).
    """
    env = dict(os.environ)
    if Path(engine).name == "podman":
        env.setdefault("CONTAINERS_CONF", str(CONTAINERS_CONF))
    return env


def _install_hint(name: str | None = None) -> str:
    if name:
        return f"install it (`apt-get install {APT_PACKAGE[name]}`)"
    return "install podman (`apt-get install podman`) or Docker (https://docs.docker.com/engine/install/)"


def find_engine(requested: str | None) -> str:
    """Path of the container engine client: the requested one, else docker, else podman."""
    candidates = (requested,) if requested else ENGINES
    for name in candidates:
        path = shutil.which(name)
        if path:
            return path
    if requested:
        raise ImageError(
            f"container engine {requested!r} not found on PATH; {_install_hint(requested)} or choose another "
            f"with --engine / CONTAINER_ENGINE ({' or '.join(ENGINES)})",
            EXIT_NO_ENGINE,
        )
    raise ImageError(
        f"no container engine found (neither docker nor podman is on PATH); {_install_hint()}, "
        "or run `make image` on a machine that has one",
        EXIT_NO_ENGINE,
    )


def engine_problem(engine: str) -> str | None:
    """Why the engine cannot build (its own last line), or None when it answers."""
    try:
        result = subprocess.run(
            [engine, "info"],
            capture_output=True,
            text=True,
            timeout=DAEMON_CHECK_TIMEOUT_SECONDS,
            env=engine_env(engine),
        )
    except subprocess.TimeoutExpired:
        return f"it did not answer within {DAEMON_CHECK_TIMEOUT_SECONDS}s"
    except OSError as error:
        raise ImageError(f"cannot run {engine} ({error}); reinstall it", EXIT_NO_ENGINE) from None
    if result.returncode == 0:
        return None
    lines = [line.strip() for line in (result.stderr or result.stdout).splitlines() if line.strip()]
    return lines[-1] if lines else f"`{Path(engine).name} info` exited {result.returncode}"


def check_engine_answers(engine: str) -> None:
    """A docker client without a reachable daemon cannot build: say so before trying."""
    reason = engine_problem(engine)
    if reason is None:
        return
    name = Path(engine).name
    if name == "podman":
        fix = "check `podman info` (rootless setup, storage) or use docker"
    else:
        fix = "start the daemon (e.g. `sudo systemctl start docker`), point DOCKER_HOST at one, or use podman"
    raise ImageError(f"{name} is installed but its engine does not answer ({reason}); {fix}", EXIT_NO_ENGINE)


def select_engine(requested: str | None) -> str:
    """The engine that will build: the requested one, else docker when its daemon answers, else podman.

    A docker client without a daemon next to a working podman (as on this project's CI
    machines) builds with podman; with only that docker client, the refusal names the daemon.
    """
    engine = find_engine(requested)
    if requested or Path(engine).name != "docker":
        check_engine_answers(engine)
        return engine
    if engine_problem(engine) is None:
        return engine
    podman = shutil.which("podman")
    if podman and engine_problem(podman) is None:
        return podman
    check_engine_answers(engine)  # raises with docker's own reason
    return engine


def inspect_image(engine: str, ref: str) -> dict | None:
    """`<engine> image inspect` of ref, or None when there is no such image (docker and podman agree)."""
    result = subprocess.run([engine, "image", "inspect", ref], capture_output=True, text=True, env=engine_env(engine))
    if result.returncode != 0:
        return None
    try:
        value = json.loads(result.stdout)
    except json.JSONDecodeError:
        return None
    return value[0] if isinstance(value, list) and value and isinstance(value[0], dict) else None


def image_id(ref: str, engine: str | None = None) -> str | None:
    """The image's ID (hex, no `sha256:`), or None when the engine has no such image."""
    details = inspect_image(engine or select_engine(None), ref)
    if not details or not details.get("Id"):
        return None
    return str(details["Id"]).removeprefix("sha256:")


def image_labels(details: dict | None) -> dict[str, str]:
    return ((details or {}).get("Config") or {}).get("Labels") or {}


# ---------------------------------------------------------------- what the image is built from


def dockerignore_rules(context: Path) -> list[tuple[bool, re.Pattern]]:
    """(exception?, regex) per .dockerignore line, in order (the last match decides, as in docker)."""
    try:
        lines = (context / ".dockerignore").read_text().splitlines()
    except FileNotFoundError:
        return []
    rules = []
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        pattern = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        regex, i = "", 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                regex, i = regex + "(?:.*/)?", i + 3
            elif pattern.startswith("**", i):
                regex, i = regex + ".*", i + 2
            elif pattern[i] == "*":
                regex, i = regex + "[^/]*", i + 1
            elif pattern[i] == "?":
                regex, i = regex + "[^/]", i + 1
            else:
                regex, i = regex + re.escape(pattern[i]), i + 1
        rules.append((exception, re.compile(regex + r"\Z")))
    return rules


def dockerignored(relative: str, rules: list[tuple[bool, re.Pattern]]) -> bool:
    """Whether the build context leaves this path out: a rule matching it or a parent directory."""
    parts = relative.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    ignored = False
    for exception, regex in rules:
        if any(regex.match(prefix) for prefix in prefixes):
            ignored = not exception
    return ignored


def source_files(context: Path, dockerfile: Dockerfile, dockerfile_path: Path, variant: str) -> list[tuple[str, Path]]:
    """Every file the build reads: the Dockerfile and each COPY source in the context (.dockerignore applied)."""
    rules = dockerignore_rules(context)
    files = [("Dockerfile", dockerfile_path)]
    for source in dockerfile.copy_sources:
        path = context / source.replace("${VARIANT}", variant)
        if path.is_dir():
            for file in sorted(p for p in path.rglob("*") if p.is_file()):
                relative = file.relative_to(context).as_posix()
                if not dockerignored(relative, rules):
                    files.append((relative, file))
        else:
            files.append((path.relative_to(context).as_posix(), path))
    return files


def source_digest(context: Path, dockerfile: Dockerfile, dockerfile_path: Path, variant: str, base: str) -> str:
    """sha256 over what the image is built from: the files, the variant and the base reference."""
    digest = hashlib.sha256()
    digest.update(f"variant={variant}\nbase={base}\n".encode())
    for relative, file in source_files(context, dockerfile, dockerfile_path, variant):
        try:
            content = file.read_bytes()
        except FileNotFoundError:
            raise ImageError(f"the Dockerfile copies {relative}, which does not exist in {context}") from None
        digest.update(f"{relative}\0{len(content)}\0".encode() + content)
    return digest.hexdigest()


# ---------------------------------------------------------------- build


@dataclass
class BuildPlan:
    engine: str
    image: str
    version: str
    variant: str
    dockerfile_path: Path
    context: Path
    base: str = "official"  # or "debian"
    base_image: str | None = None  # BASE_IMAGE/BASE_TAG build arguments; None: the Dockerfile's default
    base_tag: str | None = None
    base_digest: str | None = None
    label: str | None = None  # the source digest, stored as the SOURCE_LABEL label


def build_command(plan: BuildPlan) -> list[str]:
    command = [
        plan.engine,
        "build",
        "--file",
        str(plan.dockerfile_path),
        "--tag",
        plan.image,
        "--build-arg",
        f"VERSION={plan.version}",
        "--build-arg",
        f"VARIANT={plan.variant}",
    ]
    if plan.base_image:
        command += ["--build-arg", f"BASE_IMAGE={plan.base_image}"]
    if plan.base_tag:
        command += ["--build-arg", f"BASE_TAG={plan.base_tag}"]
    if plan.base_digest:
        command += ["--build-arg", f"BASE_DIGEST={plan.base_digest}"]
    if Path(plan.engine).name == "podman":
        # docker format: under buildah's default OCI format the Dockerfile's SHELL (pipefail) is
        # dropped with only a warning. host network: RUN steps need no NAT/bridge on the host.
        command += ["--format", "docker", "--network", "host"]
        if HOST_CA_BUNDLE.is_file():
            # The host's CA bundle, for the build's RUN steps only (a bind mount is not committed):
            # Debian's pip reads it there; PIP_CERT (an ARG, not in the image's environment) points
            # the official image's pip, which has its own certifi bundle, at it too.
            command += [
                "--volume",
                f"{HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro",
                "--build-arg",
                f"PIP_CERT={HOST_CA_BUNDLE}",
            ]
    if plan.label:
        command += ["--label", f"{SOURCE_LABEL}={plan.label}"]
    return command + [str(plan.context)]


def base_description(plan: BuildPlan, dockerfile: Dockerfile) -> str:
    ref = base_reference(dockerfile, plan.base_image, plan.base_tag)
    if plan.base == "debian":
        return f"base {ref}, built here from Debian {image_base.SUITE} packages"
    if plan.base_digest:
        return f"base {ref} pinned to {plan.base_digest}"
    return f"base {ref}, not pinned by digest"


def state_dir() -> Path:
    """Where logs, the base's scratch tree and the lock go (TFMW_IMAGE_STATE_DIR moves it)."""
    return Path(os.environ.get("TFMW_IMAGE_STATE_DIR") or DEFAULT_STATE_DIR)


@contextlib.contextmanager
def build_lock() -> Iterator[None]:
    """One build at a time per checkout (make image and the cluster's ensure_image may race)."""
    directory = state_dir()
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "build.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


BUILD_ESTIMATE = {"cpu": "~4 min", "gpu": "~10 min, 2.8 GB of NVIDIA wheels"}


def _build(
    plan: BuildPlan, dockerfile: Dockerfile, progress: Callable[[str], None], stream: bool, rebuild: bool
) -> bool:
    """Ensure plan.image exists with plan.label; True when it was built now, False when up to date."""
    name = Path(plan.engine).name
    env = engine_env(plan.engine)
    if plan.base == "debian":
        try:
            plan.base_image, plan.base_tag = image_base.base_image_and_tag()
            image_base.ensure_base(plan.engine, env=env, progress=progress, workdir=state_dir())
        except image_base.BaseError as error:
            raise ImageError(str(error), EXIT_BASE) from None
    base = base_reference(dockerfile, plan.base_image, plan.base_tag)
    if plan.base_digest:
        base += "@" + plan.base_digest
    plan.label = source_digest(plan.context, dockerfile, plan.dockerfile_path, plan.variant, base)
    existing = image_labels(inspect_image(plan.engine, plan.image)).get(SOURCE_LABEL)
    if existing == plan.label and not rebuild:
        progress(
            f"image: {plan.image} is up to date ({SOURCE_LABEL} {plan.label[:12]}; "
            f"{base_description(plan, dockerfile)})"
        )
        return False
    command = build_command(plan)
    state_dir().mkdir(parents=True, exist_ok=True)
    log = state_dir() / f"build-{plan.variant}.log"
    progress(
        f"image: building {plan.image} with {name} (one-time, {BUILD_ESTIMATE[plan.variant]}"
        + ("" if stream else f"; log {log}")
        + ")"
    )
    progress("image: " + shlex.join(command))
    started = time.monotonic()
    if stream:
        code = subprocess.run(command, env=env).returncode
        if code != 0:
            raise ImageError(f"FAILED: {name} build exited {code} (its output is above)", code)
    else:
        with open(log, "w") as out:
            code = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
        if code != 0:
            raise ImageError(
                f"{name} build exited {code} ({_last_line(log.read_text(errors='replace'))}); full log {log}", code
            )
    progress(f"image: built {plan.image} ({base_description(plan, dockerfile)}) in {time.monotonic() - started:.0f}s")
    return True


def ensure_image(
    variant: str = "cpu",
    base: str = "debian",
    progress: Callable[[str], None] = print,
    *,
    image: str | None = None,
    engine: str | None = None,
    rebuild: bool = False,
    stream: bool = False,
    context: Path = REPO_ROOT,
) -> str:
    """The full reference of the worker image, built only when its sources changed.

    Default reference: what the chart pulls with an empty image.tag, e.g.
    ghcr.io/tf-multiworker/tf-multiworker:0.1.0-cpu. Fast (a few engine calls) when the image
    already carries the current source digest. base "debian" builds (once) the Debian base
    (root and debootstrap needed), "official" uses docker.io/library/python. The engine's
    build output goes to .tools/image/build-<variant>.log unless stream. Raises ImageError.
    One build at a time per checkout: a second caller waits for the first one's lock.
    """
    version = project_version(context / "pyproject.toml")
    ref = image_reference(image, version, variant)
    check_base_choice(base, None, None, None)
    engine_path = select_engine(engine)
    dockerfile_path = context / "Dockerfile"
    dockerfile = read_dockerfile(dockerfile_path)
    plan = BuildPlan(engine_path, ref, version, variant, dockerfile_path, context, base=base)
    with build_lock():
        _build(plan, dockerfile, progress, stream=stream, rebuild=rebuild)
    return ref


def archive_name(ref: str, short_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", ref) + f"-{short_id}.tar"


def save_archive(
    ref: str, dest_dir: Path | None = None, *, engine: str | None = None, progress: Callable[[str], None] = print
) -> Path:
    """`<dest_dir>/<sanitised ref>-<image id, 12 hex>.tar`, a docker-archive of ref (kept when present).

    dest_dir defaults to .tools/image/archives.
    Import it with `ctr -n k8s.io images import <file>` (the archive carries ref as its tag).
    Older archives of the same ref (another image id) in dest_dir are removed. Raises ImageError.
    """
    engine_path = select_engine(engine)
    short = (image_id(ref, engine_path) or "")[:12]
    if not short:
        raise ImageError(f"{Path(engine_path).name} has no image {ref}; build it first (ensure_image / make image)")
    dest_dir = Path(dest_dir) if dest_dir else state_dir() / "archives"
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / archive_name(ref, short)
    if target.is_file():
        return target
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    command = [engine_path, "save", "--output", str(partial), ref]
    if Path(engine_path).name == "podman":
        command[2:2] = ["--format", "docker-archive"]
    progress(f"image: saving {ref} to {target}")
    result = subprocess.run(command, capture_output=True, text=True, env=engine_env(engine_path))
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        raise ImageError(
            f"{Path(engine_path).name} save exited {result.returncode}: {_last_line(result.stderr or result.stdout)}",
            result.returncode,
        )
    partial.rename(target)
    stale_prefix = archive_name(ref, "")[: -len(".tar")]
    for old in dest_dir.glob(glob_escape(stale_prefix) + "*.tar"):
        if old != target and re.fullmatch(re.escape(stale_prefix) + r"[0-9a-f]{12}\.tar", old.name):
            old.unlink()
    return target


def glob_escape(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


def make_image(args: argparse.Namespace) -> int:
    """`make image` with its arguments (tfmw.image.cli): the build plan, printed with --dry-run,
    else built (when the sources changed or --rebuild) and pushed with --push; the exit code."""
    version = project_version(args.context / "pyproject.toml")
    image = image_reference(args.image, version, args.variant)
    check_base_choice(args.base, args.base_image, args.base_tag, args.base_digest)
    dockerfile = read_dockerfile(args.dockerfile)
    # The engine first: without one nothing else matters on this machine.
    if args.dry_run:
        engine = args.engine or ENGINES[0]
    else:
        engine = select_engine(args.engine)
    base_ref = base_reference(dockerfile, args.base_image, args.base_tag)
    digest = check_base_digest(args.base_digest, base_ref) if args.base_digest else None
    plan = BuildPlan(
        engine,
        image,
        version,
        args.variant,
        args.dockerfile,
        args.context,
        base=args.base,
        base_image=args.base_image,
        base_tag=args.base_tag,
        base_digest=digest,
    )
    if args.dry_run:
        if args.base == "debian":
            plan.base_image, plan.base_tag = image_base.base_image_and_tag()
            print(
                f"image: base {image_base.reference()} (unless present): "
                + shlex.join(image_base.debootstrap_command(Path("<dir>")))
                + " && tar -C <dir> -c . | "
                + shlex.join(image_base.import_command(engine, image_base.reference()))
            )
        print("image: " + shlex.join(build_command(plan)))
        return 0
    with build_lock():
        _build(plan, dockerfile, lambda line: print(line, flush=True), stream=True, rebuild=args.rebuild)
    if args.push:
        return _push(engine, image, args.cert_dir)
    return 0


def push_command(engine: str, image: str, cert_dir: str | None, digest_file: Path) -> list[str]:
    """The push, and where podman writes the pushed manifest's digest (pure)."""
    if Path(engine).name != "podman":
        if cert_dir:
            raise ImageError(
                "--cert-dir/PUSH_CERT_DIR is podman's; docker reads a registry's CA from "
                "/etc/docker/certs.d/<registry>/"
            )
        return [engine, "push", image]
    return [engine, "push", *(["--cert-dir", cert_dir] if cert_dir else []), "--digestfile", str(digest_file), image]


def _push(engine: str, image: str, cert_dir: str | None) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        digest_file = Path(tmp) / "digest"
        push = push_command(engine, image, cert_dir, digest_file)
        print("image: " + shlex.join(push), flush=True)
        code = subprocess.run(push, env=engine_env(engine)).returncode
        if code != 0:
            print(f"image: FAILED: {Path(engine).name} push exited {code} (its output is above)", file=sys.stderr)
            return code
        digest = digest_file.read_text().strip() if digest_file.is_file() else ""
    if digest:
        repository = image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
        print(f"image: pushed {image} ({repository}@{digest}: pin it with image.digest={digest})")
    else:
        print(f"image: pushed {image}")
    return 0


if __name__ == "__main__":  # the command's old spelling: say where it went rather than do nothing
    sys.exit("python -m tfmw.image.build is now python -m tfmw.image (make image)")
