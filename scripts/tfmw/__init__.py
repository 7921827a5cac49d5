"""tf-multiworker's host side: the tools an ops or ML engineer runs (`make ...`, `tfmw ...`).

cli         the `tfmw` command: template, deploy, diff, status, logs, undeploy
chart/      the one helm toolkit, rendering, the values table, the Pod Security oracle
deploy/     helm install/upgrade, and what the run and its pods are doing (observe)
k8s/        the one host-side Kubernetes client (lightkube's auth and transport) and kubeconfig reader
localrun/   `make local`: the rendered pods as local processes, as a kubelet would run them
devcluster/ `make cluster`: a real control plane and real nodes built from pinned Go modules
faults/     the fault harness, locally and on the dev cluster
bench/      `make bench`
lint/       `make lint`
image/      `make image`
tools       the pinned helm/kubectl binaries in .tools/bin

The image side (`entrypoint/`) never imports this package.
"""

from pathlib import Path

# The checkout this package is installed from (editable, by `make setup`): the chart, the
# values overlays and the Dockerfile are read from it.
REPO = Path(__file__).resolve().parents[2]
