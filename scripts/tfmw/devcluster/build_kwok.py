"""The pinned kwok controller, built once from its Go module, with its stages beside it
(tfmw.devcluster.onebinary), for fake nodes under the local cluster's real control plane
(tfmw.devcluster.kwok): the topology tests and the scale bench.

The wrapper module scripts/tfmw/devcluster/gomod/kwok/ requires sigs.k8s.io/kwok at the pinned
version (its tools.go imports the controller's main package, cmd/kwok). The `kwok` binary has
no stages of its own (only kwokctl embeds them): the ones it runs come from the same module
zip's kustomize/stage/. The build follows kwok's own release script (hack/releases.sh:
`-X sigs.k8s.io/kwok/pkg/consts.Version=…`, CGO_ENABLED=0) into

    .tools/kube/kwok-<version>/bin/kwok
    .tools/kube/kwok-<version>/stage/         kwok's stages (node and pod lifecycles)

Usage: python -m tfmw.devcluster.build_kwok [--dest DIR]   (prints the install directory)
"""

from __future__ import annotations

import sys
from pathlib import Path

from tfmw.devcluster import onebinary

KWOK = onebinary.OneBinary(
    name="kwok",
    module="sigs.k8s.io/kwok",
    main_package="sigs.k8s.io/kwok/cmd/kwok",
    version_package="sigs.k8s.io/kwok/pkg/consts",
    version_vars=("Version", "GitCommit", "BuildDate"),  # kwok stamps the version only
    binary="kwok",
    copies=(("kustomize/stage", "stage"),),
    first_build_minutes=4,
)


def stage_path(install_dir: Path) -> Path:
    """kwok's stages in an install directory of onebinary.ensure(KWOK)."""
    return install_dir / "stage"


if __name__ == "__main__":
    sys.exit(onebinary.main_for([KWOK], None, __doc__))
