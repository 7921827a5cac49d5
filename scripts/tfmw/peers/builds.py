"""The peers' controllers, each built once from its pinned Go module with its manifests beside
it (tfmw.devcluster.onebinary):

    .tools/kube/training-operator-<version>/bin/manager
    .tools/kube/training-operator-<version>/manifests/   its kustomize manifests (v1.9.0)
    .tools/kube/jobset-<version>/bin/manager
    .tools/kube/jobset-<version>/config/                 its kustomize config (v0.12.0)

training-operator's Makefile stamps no version into its manager; JobSet's stamps
pkg/version.GitVersion and GitCommit, as here.

Usage: python -m tfmw.peers.builds [--dest DIR]   (prints both install directories)
"""

from __future__ import annotations

import sys
from pathlib import Path

from tfmw.devcluster import onebinary
from tfmw.devcluster.build import DEFAULT_DEST, Progress

TRAINING_OPERATOR = onebinary.OneBinary(
    name="training-operator",
    module="github.com/kubeflow/training-operator",
    main_package="github.com/kubeflow/training-operator/cmd/training-operator.v1",
    version_package=None,
    version_vars=("", "", ""),
    binary="manager",  # its image runs it as /manager (manifests/base/deployment.yaml)
    copies=(("manifests", "manifests"),),
    first_build_minutes=5,
)

JOBSET = onebinary.OneBinary(
    name="jobset",
    module="sigs.k8s.io/jobset",
    main_package="sigs.k8s.io/jobset",
    version_package="sigs.k8s.io/jobset/pkg/version",
    version_vars=("GitVersion", "GitCommit", "BuildDate"),  # it declares no BuildDate: not stamped
    binary="manager",  # its image runs it as /manager (config/components/manager/manager.yaml)
    copies=(("config", "config"),),
    first_build_minutes=5,
)

PEERS = {"tfjob": TRAINING_OPERATOR, "jobset": JOBSET}


def version(spec: onebinary.OneBinary) -> str:
    return onebinary.read_pins(spec).version


def ensure(spec: onebinary.OneBinary, dest_root: Path = DEFAULT_DEST, progress: Progress = print) -> Path:
    """The install directory of the pinned build (bin/manager and its manifests); built on first use."""
    return onebinary.ensure(spec, dest_root, progress)


def main(argv: list[str] | None = None) -> int:
    return onebinary.main_for(list(PEERS.values()), argv, __doc__, prog="python -m tfmw.peers.builds", name="peers")


if __name__ == "__main__":
    sys.exit(main())
