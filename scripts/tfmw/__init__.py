"""tf-multiworker's host side.

The users' tools, what an ops or ML engineer runs (`make ...`, `tfmw ...`):
cli         the `tfmw` command line: parses the verbs and hands each to deploy
deploy/     each verb's workflow (template, deploy, diff, status, logs, suspend, resume, retry,
            undeploy) over one release's reach and one checked, watched helm upgrade; what the run
            and its pods are doing (observe)
chart/      the one helm toolkit, rendering, the values table, the Pod Security oracle
k8s/        the one host-side Kubernetes client (lightkube's auth and transport) and kubeconfig reader
localrun/   `make local`: the rendered pods as local processes, as a kubelet would run them
image/      `make image`: the image build
lint/       `make lint`: the chart and the code checked as CI checks them
tools       `make setup`: the pinned helm/kubectl binaries in .tools/bin

The lab, what the project uses to test and measure itself:
devcluster/ `make cluster`: a real control plane and real nodes built from pinned Go modules
faults/     the fault harness, locally and on the dev cluster
bench/      `make bench`: the figures of docs/benchmarks.md
peers/      the chart's peers (a TFJob, a JobSet) for the benchmarks' comparisons

Both use the console tables and the `ip` helper beside these. The image side (`entrypoint/`)
never imports this package.
"""

from pathlib import Path

# The checkout this package is installed from (editable, by `make setup`): the chart, the
# values overlays and the Dockerfile are read from it.
REPO = Path(__file__).resolve().parents[2]
