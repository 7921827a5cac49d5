"""The peers the chart is measured against on the local cluster, opt-in (the bench's figure 10):
Kubeflow's training-operator v1 (TFJob) and the JobSet controller, each pinned, built from its
Go module and installed from its own manifests of that version, the way its users install it.
Never started by `make test`."""
