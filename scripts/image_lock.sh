#!/bin/sh
# Regenerate requirements/image-{gpu,cpu}.lock from requirements/image-{gpu,cpu}.in with
# uv's resolver, for the image's platform (linux x86_64, CPython 3.11). uv reads package
# metadata from PyPI (PEP 658) and takes the hashes from the index: no wheel is downloaded.
# Needs uv (https://docs.astral.sh/uv/; `pip install uv` into any scratch venv), or UV=path.
set -eu
cd "$(dirname "$0")/.."
UV=${UV:-uv}
for variant in gpu cpu; do
  extra=""
  # tensorflow-cpu provides the `tensorflow` module tf-keras depends on (see image-cpu.in).
  [ "$variant" = cpu ] && extra="--no-emit-package tensorflow"
  # shellcheck disable=SC2086
  "$UV" pip compile "requirements/image-$variant.in" --generate-hashes \
    --python-platform x86_64-manylinux_2_28 --python-version 3.11 \
    --no-header --annotation-style line $extra -o "requirements/image-$variant.lock"
done
