"""`make image BASE=debian`: a python:3.11-slim-bookworm stand-in built from Debian packages.

Where docker.io/library/python cannot be pulled (no registry reachable, or no Docker Hub base
wanted), the worker image is built on a base made here: debootstrap (minbase, Debian's signed
archive, checked against debian-archive-keyring) installs bookworm's python3 (3.11, the
version the hash locks are resolved for), pip and the tools the Dockerfile runs, the
EXTERNALLY-MANAGED marker goes (the official image has none: pip installs into
/usr/local/lib/python3.11/dist-packages), and the tree is imported into the container engine
as `localhost/tfmw-base:python3.11-bookworm-<recipe hash>`. The tag changes whenever the
recipe below does; an existing tag is reused without running debootstrap again.

Standard library only: it runs before the venv exists (scripts/tfmw/image/build.py imports it).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from tfmw import REPO as REPO_ROOT

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
# python:3.11-slim-bookworm's contract as the Dockerfile uses it: python/python3 3.11, pip,
# CA certificates; bash (SHELL), passwd (useradd/groupadd/userdel), libc-bin (ldconfig,
# getent). minbase adds the Essential set (coreutils: cut; grep; ...) and apt.
PACKAGES = ("python3", "python3-pip", "python-is-python3", "ca-certificates", "bash", "passwd", "libc-bin")
# The image config the official image has (its python lives in /usr/local/bin, Debian's in
# /usr/bin: both are on this PATH).
IMAGE_CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["python3"]',
)
# Removed from the tree before the import: the marker that makes pip refuse system installs
# (PEP 668), apt's caches and lists, the host's resolver/hostname that debootstrap copied in,
# documentation (the copyright files stay), as debian:bookworm-slim leaves them out.
REMOVE = (
    "usr/lib/python3.11/EXTERNALLY-MANAGED",
    "var/cache/apt/archives/*.deb",
    "var/cache/apt/*.bin",
    "var/lib/apt/lists/*_*",
    "var/log/*.log",
    "var/log/apt/*",
    "usr/share/man/*",
    "usr/share/info/*",
    "usr/share/locale/*",
    "usr/share/doc/*/[!c]*",
    "usr/share/doc/*/changelog*",
)
EMPTIED = ("etc/resolv.conf", "etc/hostname")
RECIPE_VERSION = 1  # bump when the steps below change in a way the constants do not show
REPOSITORY = "localhost/tfmw-base"
DEBOOTSTRAP_TIMEOUT_SECONDS = 1800


class BaseError(Exception):
    """A refusal or failure, one line for the user."""


def recipe_digest() -> str:
    recipe = {
        "suite": SUITE,
        "mirror": MIRROR,
        "variant": "minbase",
        "packages": sorted(PACKAGES),
        "changes": list(IMAGE_CHANGES),
        "remove": list(REMOVE),
        "emptied": list(EMPTIED),
        "version": RECIPE_VERSION,
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def base_image_and_tag() -> tuple[str, str]:
    """(BASE_IMAGE, BASE_TAG) build arguments of the Debian base this recipe makes."""
    return REPOSITORY, f"python3.11-{SUITE}-{recipe_digest()[:12]}"


def reference() -> str:
    image, tag = base_image_and_tag()
    return f"{image}:{tag}"


def check_can_build() -> None:
    """Everything debootstrap needs, refused with the fix before anything runs."""
    if shutil.which("debootstrap") is None:
        raise BaseError(
            "BASE=debian needs debootstrap, which is not on PATH; install it "
            "(`apt-get install debootstrap`) or use the official base (BASE unset)"
        )
    if os.geteuid() != 0:
        raise BaseError(
            "BASE=debian runs debootstrap, which needs root (it chroots and sets file "
            "owners); run `sudo make image BASE=debian` or use the official base (BASE unset)"
        )
    if not KEYRING.is_file():
        raise BaseError(
            f"BASE=debian checks the archive's signatures with {KEYRING}, which is missing; "
            "install it (`apt-get install debian-archive-keyring`)"
        )


def debootstrap_command(target: Path) -> list[str]:
    return [
        "debootstrap",
        "--variant=minbase",
        f"--keyring={KEYRING}",
        "--include=" + ",".join(PACKAGES),
        SUITE,
        str(target),
        MIRROR,
    ]


def import_command(engine: str, ref: str) -> list[str]:
    command = [engine, "import"]
    for change in IMAGE_CHANGES:
        command += ["--change", change]
    return command + ["-", ref]


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below path (deepest first), from /proc/self/mountinfo."""
    prefix = str(path.resolve())
    found = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        point = line.split()[4].encode().decode("unicode_escape")
        if point == prefix or point.startswith(prefix + "/"):
            found.append(point)
    return sorted(found, key=len, reverse=True)


def remove_tree(path: Path) -> None:
    """rm -rf a debootstrap target, never through a mount left in it (proc, sys, a bound /dev)."""
    if not path.exists():
        return
    for point in mounts_under(path):
        subprocess.run(["umount", "--lazy", point], capture_output=True)
    left = mounts_under(path)
    if left:
        raise BaseError(f"{left[0]} is still mounted inside {path}; unmount it, then remove {path} by hand")
    shutil.rmtree(path)


def safe_glob(root: Path, pattern: str) -> list[Path]:
    """Matches of a relative glob below root, never following a symlink out of the tree.

    Path.glob follows symlinks: an absolute one in the debootstrapped tree would lead to the
    host's own files. Only real directories are descended into; a symlink can match as a leaf.
    """
    found = [root]
    for part in pattern.split("/"):
        nxt = []
        for directory in found:
            if directory.is_symlink() or not directory.is_dir():
                continue
            nxt.extend(entry for entry in sorted(directory.iterdir()) if fnmatch.fnmatchcase(entry.name, part))
        found = nxt
    return found


def trim(root: Path) -> None:
    for pattern in REMOVE:
        for match in safe_glob(root, pattern):
            if match.is_dir() and not match.is_symlink():
                shutil.rmtree(match)
            else:
                match.unlink()
    for name in EMPTIED:
        file = root / name
        if file.is_symlink() or file.exists():
            file.unlink()
        file.write_text("")


def image_exists(engine: str, ref: str, env: Mapping[str, str] | None = None) -> bool:
    result = subprocess.run([engine, "image", "inspect", ref], capture_output=True, text=True, env=env)
    return result.returncode == 0 and result.stdout.strip().startswith("[")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def ensure_base(
    engine: str,
    env: Mapping[str, str] | None = None,
    progress: Callable[[str], None] = print,
    workdir: Path | None = None,
    log: Path | None = None,
) -> str:
    """The base's reference, built and imported into engine's storage unless it is already there."""
    ref = reference()
    if image_exists(engine, ref, env):
        progress(f"image: base {ref} (Debian {SUITE}, already built)")
        return ref
    check_can_build()
    workdir = workdir or REPO_ROOT / ".tools" / "image"
    workdir.mkdir(parents=True, exist_ok=True)
    log = log or workdir / "debootstrap.log"
    progress(f"image: building base {ref}: debootstrap {SUITE} from {MIRROR} (one-time, ~3 min; log {log})")
    root = Path(tempfile.mkdtemp(prefix="base-rootfs-", dir=workdir))
    try:
        with open(log, "w") as out:
            try:
                code = subprocess.run(
                    debootstrap_command(root), stdout=out, stderr=subprocess.STDOUT, timeout=DEBOOTSTRAP_TIMEOUT_SECONDS
                ).returncode
            except subprocess.TimeoutExpired:
                raise BaseError(
                    f"debootstrap did not finish within {DEBOOTSTRAP_TIMEOUT_SECONDS}s; see {log}"
                ) from None
        if code != 0:
            raise BaseError(f"debootstrap exited {code} ({_last_line(log.read_text(errors='replace'))}); see {log}")
        for point in mounts_under(root):  # debootstrap unmounts proc/sys itself; be sure
            subprocess.run(["umount", "--lazy", point], capture_output=True)
        trim(root)
        python = root / "usr" / "bin" / "python"
        if not (python.is_symlink() or python.exists()):
            raise BaseError(f"the debootstrapped tree has no /usr/bin/python (python-is-python3); see {log}")
        progress(f"image: importing base {ref} into {Path(engine).name}")
        tar = subprocess.Popen(
            ["tar", "--numeric-owner", "--xattrs", "-C", str(root), "-c", "."],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        result = subprocess.run(import_command(engine, ref), stdin=tar.stdout, capture_output=True, text=True, env=env)
        tar.stdout.close()
        tar_error = tar.stderr.read().decode(errors="replace")
        tar_code = tar.wait()
        if tar_code != 0:
            raise BaseError(f"tar of the base tree exited {tar_code}: {_last_line(tar_error)}")
        if result.returncode != 0:
            raise BaseError(
                f"{Path(engine).name} import exited {result.returncode}: {_last_line(result.stderr or result.stdout)}"
            )
    finally:
        remove_tree(root)
    return ref
