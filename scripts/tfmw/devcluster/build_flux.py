"""Flux's source-controller and helm-controller, pinned and built once from their Go modules,
each with its CRDs beside it (tfmw.devcluster.onebinary), for the local cluster's GitOps tests
and `make cluster FLUX=1` (tfmw.devcluster.flux).

Two wrapper modules, scripts/tfmw/devcluster/gomod/flux-source-controller/ and
flux-helm-controller/, each require one controller at the pinned version (a matched Flux 2.7
pair: helm-controller v1.4.5 requires source-controller's API v1.7.2, which v1.7.3 serves) and
repeat its own go.mod's replace directives; one module for both cannot be: the two pin
different go-digest commits. Flux's images build with `go build -trimpath` and no version
stamp (CGO_ENABLED=0); the binaries report their version in the module data `go version -m`
shows, which the build checks. Installed into

    .tools/kube/flux-source-controller-<version>/bin/source-controller
    .tools/kube/flux-source-controller-<version>/crd/   its CRDs (config/crd/bases of the module zip)
    .tools/kube/flux-helm-controller-<version>/bin/helm-controller
    .tools/kube/flux-helm-controller-<version>/crd/

Usage: python -m tfmw.devcluster.build_flux [--dest DIR]   (prints the install directories)
"""

from __future__ import annotations

import sys
from pathlib import Path

from tfmw.devcluster import onebinary

SOURCE_CONTROLLER = onebinary.OneBinary(
    name="flux-source-controller",
    module="github.com/fluxcd/source-controller",
    main_package="github.com/fluxcd/source-controller",
    version_package=None,
    version_vars=("", "", ""),
    binary="source-controller",
    copies=(("config/crd/bases", "crd"),),
    first_build_minutes=10,  # 9m39s measured on the shared 2-core machine (load 5-10)
    tag="flux",
)

HELM_CONTROLLER = onebinary.OneBinary(
    name="flux-helm-controller",
    module="github.com/fluxcd/helm-controller",
    main_package="github.com/fluxcd/helm-controller",
    version_package=None,
    version_vars=("", "", ""),
    binary="helm-controller",
    copies=(("config/crd/bases", "crd"),),
    first_build_minutes=4,  # 3m56s after source-controller's build (their common packages cached)
    tag="flux",
)

CONTROLLERS = (SOURCE_CONTROLLER, HELM_CONTROLLER)


def crd_files(install_dir: Path) -> list[Path]:
    """The CRDs in an install directory of onebinary.ensure(SOURCE_CONTROLLER or HELM_CONTROLLER)."""
    return sorted((install_dir / "crd").glob("*.yaml"))


if __name__ == "__main__":
    sys.exit(onebinary.main_for(list(CONTROLLERS), None, __doc__, name="flux"))
