# tf-multiworker worker image: the official TensorFlow GPU image plus the `entrypoint`
# launcher (TF_CONFIG from the pod ordinal, peer wait, supervisor, built-in trainer).
#
# Build: `make image` (scripts/image.py), or by hand:
#   docker build --build-arg VERSION=0.1.0 \
#     --build-arg TF_BASE_DIGEST=sha256:<digest> -t tf-multiworker:0.1.0 .
# See docs/image.md for pinning, scanning, pushing and adding your own training code.

# The base is pinned by tag AND digest: the tag says what it is (its TensorFlow version
# must equal the tensorflow pin in pyproject.toml; tests/lint/test_dockerfile.py checks
# it), the digest makes the build reproducible even if the tag is re-pushed.
# TF_BASE_DIGEST could not be looked up where this file was written (no registry
# access), so its default is a placeholder that refuses to build. Fill it with the
# multi-arch index digest printed by:
#   docker buildx imagetools inspect tensorflow/tensorflow:2.21.0-gpu
# (the "Digest:" line), either here or per build with --build-arg TF_BASE_DIGEST=...
ARG TF_BASE_IMAGE=tensorflow/tensorflow
ARG TF_BASE_TAG=2.21.0-gpu
ARG TF_BASE_DIGEST=sha256:PLACEHOLDER-fill-with-docker-buildx-imagetools-inspect

FROM ${TF_BASE_IMAGE}:${TF_BASE_TAG}@${TF_BASE_DIGEST}

ARG TF_BASE_IMAGE
ARG TF_BASE_TAG
ARG TF_BASE_DIGEST
ARG VERSION=unknown

LABEL org.opencontainers.image.title="tf-multiworker" \
      org.opencontainers.image.description="TensorFlow MultiWorkerMirroredStrategy worker: TF_CONFIG from the StatefulSet ordinal, peer wait, supervised training" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="docker.io/${TF_BASE_IMAGE}:${TF_BASE_TAG}" \
      org.opencontainers.image.base.digest="${TF_BASE_DIGEST}"

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
# be the same so file ownership in shared storage and $HOME agree. Some Ubuntu bases
# already own UID 1000 (user "ubuntu" since 24.04); drop that user first.
RUN if getent passwd 1000 >/dev/null; then userdel --remove "$(getent passwd 1000 | cut -d: -f1)"; fi \
    && if getent group 1000 >/dev/null; then groupdel "$(getent group 1000 | cut -d: -f1)"; fi \
    && groupadd --gid 1000 tfmw \
    && useradd --uid 1000 --gid 1000 --create-home --shell /usr/sbin/nologin tfmw

# Runtime dependencies of the entrypoint, pinned. TensorFlow itself comes from the base
# image and must not be installed a second time (a pip tensorflow over the base image's
# would replace its CUDA-matched build and add gigabytes): so tf-keras is installed with
# --no-deps (its only dependency is tensorflow), and the package below with --no-deps
# (pyhelm3 is a host-side dependency, never used in the container). The last command
# fails the build if the base image's TensorFlow is not the version tf-keras is built for.
RUN pip install --no-cache-dir --no-deps tf-keras==2.21.0 \
    && pip install --no-cache-dir pyyaml==6.0.4 jsonschema==4.26.0 \
    && python -c "import tensorflow as tf, tf_keras; assert tf.__version__.startswith('2.21.'), tf.__version__"

WORKDIR /app

# Only what `pip install .` needs (the rest is excluded by .dockerignore too).
COPY pyproject.toml README.md /src/
COPY entrypoint /src/entrypoint
# The smoke test runs the launcher from site-packages (the source is gone by then).
RUN pip install --no-cache-dir --no-deps /src \
    && rm -rf /src \
    && python -m entrypoint --help >/dev/null

USER 1000:1000

# TF gRPC (the chart's workers.port default, container port "grpc"); documentation only.
EXPOSE 2222

# No HEALTHCHECK: Kubernetes ignores Docker health checks; the chart's probes decide.
# The chart overrides both: command ["python","-m","entrypoint","run","--"] and
# args = training.command + training.args. Without the chart, `docker run` gets the same
# launcher running the built-in trainer.
ENTRYPOINT ["python", "-m", "entrypoint"]
CMD ["run", "--", "python", "-m", "entrypoint.training"]
