"""The one home for the helm/Kubernetes toolkit and the local control plane.

Everything host-side that talks to Kubernetes lives here: the pinned upstream
control-plane binaries (etcd, kube-apiserver, kube-controller-manager and
kube-scheduler, built once from their Go modules by `tfmw.devcluster.build` into
`.tools/kube/`), and the local control plane that runs them on loopback, so
`make cluster` and the chart's real ops path share one set of versions and helpers.
"""
