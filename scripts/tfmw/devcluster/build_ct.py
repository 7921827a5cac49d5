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

from tfmw.devcluster import onebinary

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


if __name__ == "__main__":
    sys.exit(onebinary.main_for([CT], None, __doc__))
