"""The peers the chart is measured against on the local cluster, opt-in (the bench's figures 10
and 11): Kubeflow's training-operator v1 (TFJob) and the JobSet controller, each pinned, built
from its Go module and installed from its own manifests of that version, the way its users
install it. Never started by `make test`."""
