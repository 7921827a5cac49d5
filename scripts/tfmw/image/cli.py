"""Build the worker image with docker or podman: `make image` / `python -m tfmw.image`.

Runs with the bootstrap interpreter (no venv needed), so it uses the standard library only.

    python -m tfmw.image [--variant gpu|cpu] [--image [REGISTRY/]NAME[:TAG]]
                         [--base official|debian] [--base-image IMAGE] [--base-tag TAG]
                         [--engine docker|podman] [--base-digest sha256:...] [--push]
                         [--rebuild] [--dry-run]

Only the command line: what the build does, and why, is tfmw.image.build's.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from tfmw.image import build
from tfmw.image.dockerfile import ImageError


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tfmw.image", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--variant",
        default=os.environ.get("VARIANT") or "gpu",
        help="gpu (tensorflow[and-cuda], default) or cpu (tensorflow-cpu); env VARIANT",
    )
    parser.add_argument(
        "--image",
        default=os.environ.get("IMAGE"),
        help="[registry/]name[:tag] (default: env IMAGE, else the chart's image.repository); "
        "without a tag, <version> (gpu) or <version>-cpu (cpu) is added",
    )
    parser.add_argument(
        "--base",
        default=os.environ.get("BASE") or "official",
        help="official (docker.io/library/python, default) or debian (built here with debootstrap; root); env BASE",
    )
    parser.add_argument(
        "--base-image",
        default=os.environ.get("BASE_IMAGE") or None,
        help="the official base's repository (build arg BASE_IMAGE); env BASE_IMAGE",
    )
    parser.add_argument(
        "--base-tag",
        default=os.environ.get("BASE_TAG") or None,
        help="the official base's tag (build arg BASE_TAG); env BASE_TAG",
    )
    parser.add_argument(
        "--engine",
        default=os.environ.get("CONTAINER_ENGINE"),
        choices=build.ENGINES,
        help="container engine (default: env CONTAINER_ENGINE, else docker if its daemon answers, else podman)",
    )
    parser.add_argument(
        "--base-digest",
        default=os.environ.get("BASE_DIGEST"),
        help="sha256 digest pinning the Python base image (default: env BASE_DIGEST, else unpinned)",
    )
    parser.add_argument(
        "--push",
        action="store_true",
        default=os.environ.get("PUSH") == "1",
        help="push the image after building it (env PUSH=1)",
    )
    parser.add_argument(
        "--cert-dir",
        default=os.environ.get("PUSH_CERT_DIR") or None,
        help="podman: the pushed-to registry's CA certificates (a directory with ca.crt; env PUSH_CERT_DIR); "
        "credentials come from `podman login` (or REGISTRY_AUTH_FILE)",
    )
    parser.add_argument(
        "--rebuild",
        action="store_true",
        help=f"build even when the image's {build.SOURCE_LABEL} label matches the sources",
    )
    parser.add_argument("--dockerfile", type=Path, default=build.REPO_ROOT / "Dockerfile")
    parser.add_argument("--context", type=Path, default=build.REPO_ROOT)
    parser.add_argument("--dry-run", action="store_true", help="print the build command instead of running it")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return build.make_image(args)
    except ImageError as error:
        message = str(error)
        print(message if message.startswith("image: ") else f"image: {message}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("image: interrupted", file=sys.stderr)
        return 130
