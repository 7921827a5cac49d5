# tf-multiworker worker image: a slim Python 3.11 base, TensorFlow from PyPI installed from a
# hash lock, plus the `entrypoint` launcher (TF_CONFIG from the pod ordinal, peer wait,
# supervisor, built-in trainer).
#
# Build: `make image [VARIANT=cpu|gpu] [IMAGE=registry/name] [BASE=debian]` (scripts/tfmw/image/build.py),
# or by hand:
#   docker build --build-arg VERSION=0.1.0 -t tf-multiworker:0.1.0 .                     # GPU
#   docker build --build-arg VERSION=0.1.0 --build-arg VARIANT=cpu -t tf-multiworker:0.1.0-cpu .
# With podman/buildah add `--format docker`: under the default OCI format the SHELL line below
# (pipefail) is ignored with only a warning.
# See docs/image.md for the facts this file relies on, pushing, and adding your own code.

# Not the tensorflow/tensorflow:*-gpu image: its system cuDNN does not match TF 2.21 (cuDNN
# init fails, no GPU registered). CUDA and cuDNN come as NVIDIA wheels through the
# tensorflow[and-cuda] extra instead; the node needs only the driver.
# The tag says what the base is. BASE_DIGEST pins it (docker then pulls exactly that
# manifest and fails if the tag moved elsewhere); empty by default so a clean clone builds
# with no build arguments. `make image BASE_DIGEST=sha256:...` checks its form first.
ARG BASE_IMAGE=docker.io/library/python
ARG BASE_TAG=3.11-slim-bookworm
ARG BASE_DIGEST=

FROM ${BASE_IMAGE}:${BASE_TAG}${BASE_DIGEST:+@${BASE_DIGEST}}

ARG BASE_IMAGE
ARG BASE_TAG
ARG BASE_DIGEST
ARG VERSION=unknown
# gpu: tensorflow[and-cuda] (NVIDIA wheels); cpu: tensorflow-cpu (no CUDA, much smaller).
ARG VARIANT=gpu
# Build time only (an ARG: in RUN steps' environment, not in the image's): a CA bundle for pip
# where outbound TLS is re-signed by a local CA. `make image` with podman mounts the host's
# bundle read-only and sets this to it; unset otherwise. No certificate enters the image.
ARG PIP_CERT

LABEL org.opencontainers.image.title="tf-multiworker" \
      org.opencontainers.image.description="TensorFlow MultiWorkerMirroredStrategy worker: TF_CONFIG from the StatefulSet ordinal, peer wait, supervised training" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE_IMAGE}:${BASE_TAG}" \
      org.opencontainers.image.base.digest="${BASE_DIGEST}"

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# TF_USE_LEGACY_KERAS=1: Keras 3's model.fit fails under MWMS across processes on
# TF 2.21 (keras-team/keras#20585); the trainer uses tf-keras, which trains.
# No .pyc files: the root filesystem is read-only at run time (the chart sets
# readOnlyRootFilesystem), so Python could not write them anyway.
ENV TF_USE_LEGACY_KERAS=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

# The chart runs the pod as runAsUser/runAsGroup 1000 (user tfmw): the image's user must
# be the same so file ownership in shared storage and $HOME agree. Drop any user or group
# that already owns 1000 first (Ubuntu bases own it as "ubuntu" since 24.04).
RUN if getent passwd 1000 >/dev/null; then userdel --remove "$(getent passwd 1000 | cut -d: -f1)"; fi \
    && if getent group 1000 >/dev/null; then groupdel "$(getent group 1000 | cut -d: -f1)"; fi \
    && groupadd --gid 1000 tfmw \
    && useradd --uid 1000 --gid 1000 --create-home --shell /usr/sbin/nologin tfmw

# A VARIANT with no lock would otherwise fail at COPY with a message about a missing file.
RUN case "${VARIANT}" in cpu|gpu) ;; *) echo "VARIANT=${VARIANT}: must be cpu or gpu" >&2; exit 1;; esac

# Every Python package of the image, pinned with hashes (requirements/image-*.lock,
# resolved by scripts/image_lock.sh for linux x86_64 / CPython 3.11). --require-hashes
# refuses anything not in the lock; --no-deps because the lock is the whole closure (and the
# CPU lock leaves out `tensorflow`, which tf-keras names but tensorflow-cpu provides).
COPY requirements/image-${VARIANT}.lock /tmp/requirements.lock
RUN pip install --no-cache-dir --no-deps --require-hashes -r /tmp/requirements.lock \
    && rm /tmp/requirements.lock

# TensorFlow's RUNPATH names only some of the NVIDIA wheels' library directories (it omits
# cusolver, nvjitlink, curand and nvrtc): without this, list_physical_devices('GPU') is
# empty ("Cannot dlopen some GPU libraries"). Register every site-packages/nvidia/*/lib
# directory with the dynamic linker, found by glob at build time (no hand-kept list), and
# fail the build if the GPU variant's linker cache lacks one of the libraries TF's RUNPATH
# misses. The CPU variant has no nvidia directory and registers nothing.
RUN site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    && for dir in "${site}"/nvidia/*/lib; do if [ -d "${dir}" ]; then echo "${dir}"; fi; done > /etc/ld.so.conf.d/nvidia-wheels.conf \
    && ldconfig \
    && cache="$(ldconfig -p)" \
    && if [ "${VARIANT}" = gpu ]; then for lib in libcusolver.so libnvJitLink.so libcurand.so libnvrtc.so libcudnn.so libcublas.so; do case "${cache}" in *"/${lib}"*) ;; *) echo "${lib} is not in the linker cache" >&2; exit 1;; esac; done; fi \
    && python -c "import tensorflow as tf, tf_keras, tensorboard; assert tf.__version__.startswith('2.21.'), tf.__version__"

WORKDIR /app

# Only what `pip install .` needs (the rest is excluded by .dockerignore too).
COPY pyproject.toml README.md /src/
COPY entrypoint /src/entrypoint
# --no-deps: the lock above already holds the runtime dependencies (pyhelm3 is host-side and
# never used in the container). --no-build-isolation: build with the lock's setuptools instead
# of fetching the build backend unpinned (and online) into a throwaway environment. The smoke
# test runs the launcher from site-packages.
RUN pip install --no-cache-dir --no-deps --no-build-isolation /src \
    && rm -rf /src \
    && python -m entrypoint --help >/dev/null

USER 1000:1000

# TF gRPC (the chart's workers.port default, container port "grpc"); documentation only.
EXPOSE 2222

# No HEALTHCHECK: Kubernetes ignores Docker health checks. In the chart the launcher supervises
# the trainer itself (its heartbeat and hang watchdog, docs/failure-model.md).
# The chart overrides both: command ["python","-m","entrypoint","run","--"] and
# args = training.command + training.args. Without the chart, `docker run` gets the same
# launcher running the built-in trainer.
ENTRYPOINT ["python", "-m", "entrypoint"]
CMD ["run", "--", "python", "-m", "entrypoint.training"]
