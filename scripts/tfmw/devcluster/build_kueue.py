"""The pinned Kueue manager, built once from its Go module, with its Helm chart beside it
(tfmw.devcluster.onebinary), for the local cluster (tfmw.devcluster.kueue).

The wrapper module scripts/tfmw/devcluster/gomod/kueue/ requires sigs.k8s.io/kueue at the
pinned version (its tools.go imports the manager's main package, cmd/kueue). The build follows
Kueue's own Makefile (`-X …/pkg/version.GitVersion=… GitCommit=… BuildDate=…`, CGO_ENABLED=0,
as its image is built) into

    .tools/kube/kueue-<version>/bin/manager
    .tools/kube/kueue-<version>/chart/        Kueue's Helm chart, from the same module zip

Usage: python -m tfmw.devcluster.build_kueue [--dest DIR]   (prints the install directory)
"""

from __future__ import annotations

import sys
from pathlib import Path

from tfmw.devcluster import onebinary

KUEUE = onebinary.OneBinary(
    name="kueue",
    module="sigs.k8s.io/kueue",
    main_package="sigs.k8s.io/kueue/cmd/kueue",
    version_package="sigs.k8s.io/kueue/pkg/version",
    version_vars=("GitVersion", "GitCommit", "BuildDate"),
    binary="manager",  # the name Kueue's image runs it by (ENTRYPOINT ["/manager"])
    copies=(("charts/kueue", "chart"),),
    first_build_minutes=6,
)


def chart_path(install_dir: Path) -> Path:
    """Kueue's Helm chart in an install directory of onebinary.ensure(KUEUE)."""
    return install_dir / "chart"


if __name__ == "__main__":
    sys.exit(onebinary.main_for([KUEUE], None, __doc__))
