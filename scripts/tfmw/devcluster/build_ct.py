"""The pinned chart-testing `ct`, built once from its Go module, with its default config beside
it (tfmw.devcluster.onebinary), for make lint's `ct lint` (ct.yaml at the repository's root).

The wrapper module scripts/tfmw/devcluster/gomod/ct/ requires github.com/helm/chart-testing/v3
at the pinned version (its tools.go imports the `ct` main package). The build stamps what
chart-testing's release does (.goreleaser.yml: `-X …/ct/cmd.Version=… GitCommit=… BuildDate=…`,
CGO_ENABLED=0) into

    .tools/kube/ct-<version>/bin/ct
    .tools/kube/ct-<version>/etc/      chart_schema.yaml and lintconf.yaml, from the same module zip

Usage: python -m tfmw.devcluster.build_ct [--dest DIR]   (prints the install directory)
"""

from __future__ import annotations

import sys
from pathlib import Path

from tfmw.devcluster import onebinary
from tfmw.devcluster.build import DEFAULT_DEST, Progress

CT = onebinary.OneBinary(
    name="ct",
    module="github.com/helm/chart-testing/v3",
    main_package="github.com/helm/chart-testing/v3/ct",
    version_package="github.com/helm/chart-testing/v3/ct/cmd",
    version_vars=("Version", "GitCommit", "BuildDate"),
    binary="ct",
    copies=(("etc", "etc"),),
    first_build_minutes=2,
)


def ensure_ct(dest_root: Path = DEFAULT_DEST, progress: Progress = print) -> Path:
    """The install directory of the pinned ct (bin/ct, etc/); built on first use."""
    return onebinary.ensure(CT, dest_root, progress)


if __name__ == "__main__":
    sys.exit(onebinary.main_for(CT, ensure_ct, None, __doc__))
