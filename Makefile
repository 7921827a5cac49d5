# tf-multiworker: the verbs an ops engineer types.
# Every target installs what it needs on first use (venv, pinned helm/kubectl).
.DEFAULT_GOAL := help
SHELL := /bin/bash

# ENV= names the overlay values/<ENV>.yaml; its `target` block names the release, namespace and
# kube context (RELEASE=/NAMESPACE= override them). No ENV: the local overlay, which deploy and
# undeploy send only to a local cluster.
ENV ?=
RELEASE ?=
NAMESPACE ?=
# ANY_CONTEXT=1: deploy/undeploy/suspend/resume/retry on the kube context in use whatever the
# overlay's target.kubeContext says (another context, "@local", none), also with SET= or VALUES= changing it
ANY_CONTEXT ?=
# VALUES=path[,path]: values files of your own, layered after the overlay in the order given (helm -f).
# SET= items are split on spaces and typed by helm (5 a number, true a boolean); SET_STRING= items
# are always text (helm --set-string); SET_JSON= is one helm --set-json argument, not split on
# spaces (key=JSON[,key=JSON]); SET_FILE= items are key=path (the file's text). Helm layers them
# in this order: chart values.yaml < overlay < VALUES files < SET_JSON < SET < SET_STRING < SET_FILE.
VALUES ?=
SET ?=
SET_STRING ?=
SET_JSON ?=
SET_FILE ?=
# KUBE_VERSION=1.30: check the rendered manifests against that Kubernetes (default: the newest supported)
KUBE_VERSION ?=
QUICK ?=
# make bench PEERS=1: also figures 10 and 11, the chart beside Kubeflow's TFJob and a JobSet (their
# controllers built once from their pinned Go modules and installed on the figures' own clusters;
# figure 11, a node lost, takes a fresh cluster per run and up to 10 minutes a peer)
PEERS ?=
FRESH ?=
# Cluster targets: kube context (default: current), helm --timeout, DRY_RUN=1 renders and prints only.
KUBE_CONTEXT ?=
TIMEOUT ?=
DRY_RUN ?=
# make deploy stops when a worker pod stays Unschedulable this long (seconds, default 120) with no
# autoscaler adding a node for it; an image the nodes cannot get stops it at once
UNSCHEDULABLE_GRACE ?=
CTX_ARG = $(if $(KUBE_CONTEXT),--kube-context $(KUBE_CONTEXT))
# the environment and where its release goes, as the tfmw verbs take them
TARGET_ARGS = $(if $(ENV),--env $(ENV)) $(if $(RELEASE),--release $(RELEASE)) $(if $(NAMESPACE),--namespace $(NAMESPACE)) $(CTX_ARG)
GUARD_ARG = $(if $(filter 1,$(ANY_CONTEXT)),--any-context)
# what is layered over the overlay, as the verbs that render take it (SET_JSON in single quotes,
# as JSON holds double quotes; a ' inside it, as in "it's", written '\'' for the shell)
SET_ARGS = $(if $(VALUES),--values "$(VALUES)") $(if $(SET_JSON),--set-json '$(subst ','\'',$(SET_JSON))') $(if $(SET),--set "$(SET)") $(if $(SET_STRING),--set-string "$(SET_STRING)") $(if $(SET_FILE),--set-file "$(SET_FILE)")
RENDER_ARGS = $(SET_ARGS) $(if $(KUBE_VERSION),--kube-version $(KUBE_VERSION))
PYTEST_ARGS ?=
# make cluster: nodes (1-7, default 2) and nvidia.com/gpu capacity each advertises (no GPU is used);
# KUEUE=1 also installs the pinned Kueue and a ClusterQueue (built once, ~6 min)
# FLUX=1 also starts the pinned Flux source- and helm-controller and the local OCI registry (built once)
NODES ?=
GPUS ?=
KUEUE ?=
FLUX ?=
# make image: gpu (tensorflow[and-cuda], tag <version>) or cpu (tensorflow-cpu, tag <version>-cpu);
# IMAGE=registry/name (the variant's tag is added) or name:tag, default the chart's image.repository;
# PUSH=1 pushes after building; BASE=debian builds the Python base here from Debian packages
# (debootstrap, root) instead of pulling docker.io/library/python; BASE_IMAGE=/BASE_TAG= choose
# another official-style base; BASE_DIGEST=sha256:... pins it (read from the environment by
# scripts/tfmw/image/build.py). PUSH_CERT_DIR=<dir with ca.crt>: the registry's private CA for podman's push;
# its credentials come from `podman login` (or REGISTRY_AUTH_FILE).
VARIANT ?=
IMAGE ?=
PUSH ?=
BASE ?=
BASE_IMAGE ?=
BASE_TAG ?=
# make chart-push: REGISTRY=oci://<registry>/<path> (log in first: helm registry login <registry>);
# REGISTRY_CA=<file> for a registry whose certificate a private CA signed
REGISTRY ?=
REGISTRY_CA ?=

PYTHON_BOOTSTRAP ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# the host side's command, installed into the venv with the tfmw package (scripts/tfmw)
TFMW := $(VENV)/bin/tfmw
TOOLS := .tools/bin
# HELM= names an existing helm binary; otherwise the pinned one in .tools/bin is used.
HELM ?= $(CURDIR)/$(TOOLS)/helm
export HELM
CHART := charts/tf-multiworker

VENV_STAMP := $(VENV)/.installed-stamp
TOOLS_STAMP := $(TOOLS)/.installed-stamp
# etcd, kube-apiserver/-controller-manager/-scheduler, kubelet, kube-proxy and CoreDNS, built
# once from pinned Go modules
KUBE_STAMP := .tools/kube/.installed-stamp
KUBE_GOMOD := $(wildcard scripts/tfmw/devcluster/gomod/*/go.mod scripts/tfmw/devcluster/gomod/*/go.sum scripts/tfmw/devcluster/gomod/*/tools.go scripts/tfmw/devcluster/gomod/*/main.go)
# chart-testing's ct (make lint's `ct lint`), built once from its pinned Go module; .tools/bin/ct links to it
CT_STAMP := $(TOOLS)/.ct-stamp

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-10s %s\n", $$1, $$2}'
	@echo "  variables: ENV=<$(shell ls values | sed 's/\.yaml$$//' | paste -sd'|')> (default local) RELEASE= NAMESPACE= KUBE_CONTEXT= ANY_CONTEXT=1 VALUES=a.yaml,b.yaml SET='k=v ...' SET_STRING='k=v ...' SET_JSON='k=json' SET_FILE='k=path ...' KUBE_VERSION= HELM=path QUICK=1"

# The venv gets the image's versions of every package both have (the CPU lock, its hashes
# dropped, as pip constraints): `make local` trains on the image's stack. Unconstrained, pip
# took ml-dtypes 0.7.0, whose module init alone costs 1 s of every trainer start (0.6.0: 8 ms).
$(VENV_STAMP): pyproject.toml requirements/image-cpu.lock
	@test -x $(PY) || $(PYTHON_BOOTSTRAP) -m venv $(VENV)
	@sed -n 's/^\([A-Za-z0-9_.-]*==[^ ]*\).*/\1/p' requirements/image-cpu.lock > $(VENV)/image-constraints.txt
	$(PY) -m pip install --quiet --disable-pip-version-check -c $(VENV)/image-constraints.txt -e '.[dev]'
	@touch $@

$(TOOLS_STAMP): $(VENV_STAMP) scripts/tfmw/tools.py
	$(PY) -m tfmw.tools --dest $(TOOLS)
	@touch $@

$(KUBE_STAMP): $(VENV_STAMP) scripts/tfmw/devcluster/build.py scripts/tfmw/devcluster/build_coredns.py $(KUBE_GOMOD)
	$(PY) -m tfmw.devcluster.build
	$(PY) -m tfmw.devcluster.build_coredns >/dev/null
	@touch $@

$(CT_STAMP): $(VENV_STAMP) scripts/tfmw/devcluster/onebinary.py scripts/tfmw/devcluster/build_ct.py scripts/tfmw/devcluster/gomod/ct/go.mod scripts/tfmw/devcluster/gomod/ct/go.sum
	@mkdir -p $(TOOLS)
	ln -sfn "$$($(PY) -m tfmw.devcluster.build_ct)/bin/ct" $(TOOLS)/ct
	@touch $@

.PHONY: setup
setup: $(VENV_STAMP) $(TOOLS_STAMP) $(KUBE_STAMP) ## Create the venv, install pinned helm/helm3/kubectl, build the pinned Kubernetes, etcd and CoreDNS once (idempotent)

# What the verbs that never start a local control plane need: no Go build on their first use.
.PHONY: setup-tools
setup-tools: $(VENV_STAMP) $(TOOLS_STAMP)

# Debian packages of the local cluster's nodes and the image build (apt when root; else it names them).
.PHONY: host-packages
host-packages: ## Install the Debian packages make cluster and make image need (containerd, runc, CNI, podman, ...)
	@bash scripts/host_packages.sh

.PHONY: test
test: setup host-packages lint ## make lint, then every test (unit, chart, deploy, training, e2e with real TensorFlow)
	$(PY) -m pytest $(PYTEST_ARGS)

.PHONY: test-fast
test-fast: setup host-packages $(CT_STAMP) ## Run the fast tests only (no real TensorFlow training); installs what they check against (promtool, ct, the cluster's programs) on first use
	$(PY) -m pytest -m 'not slow' $(PYTEST_ARGS)

.PHONY: lint
lint: setup-tools $(CT_STAMP) ## helm lint --strict (Helm 4+3), kubernetes-validate 1.30/1.35, checkov, hadolint, yamllint, ruff, ct lint
	$(PY) -m tfmw.lint

.PHONY: template
template: setup-tools ## Render the chart for ENV into build/<ENV>/manifests.yaml
	$(TFMW) template $(TARGET_ARGS) $(RENDER_ARGS)

.PHONY: check
check: setup-tools ## Every check template runs (values, training config, chart, strict manifests), no file, no cluster; no ENV: VALUES= alone (a GitOps repo's)
	$(TFMW) check $(TARGET_ARGS) $(RENDER_ARGS)

.PHONY: local
local: setup-tools ## Train for real on this machine: the chart rendered with values/local.yaml, one process per worker
	$(PY) -m tfmw.localrun --env $(or $(ENV),local) $(SET_ARGS) $(if $(FRESH),--fresh)

.PHONY: cluster
cluster: setup host-packages ## Start a real local Kubernetes (root): control plane, CoreDNS, NODES real nodes running the worker image; prints `export KUBECONFIG=...`
	$(PY) -m tfmw.devcluster up $(if $(NODES),--nodes $(NODES)) $(if $(GPUS),--gpus-per-node $(GPUS)) $(if $(BASE),--base $(BASE)) $(if $(KUEUE),--kueue) $(if $(FLUX),--flux)

.PHONY: cluster-load
cluster-load: setup-tools ## Rebuild the worker image if its sources changed and import it into every node of the running cluster
	$(PY) -m tfmw.devcluster load $(if $(BASE),--base $(BASE))

.PHONY: cluster-down
cluster-down: $(VENV_STAMP) ## Stop the local cluster: no process, mount, cgroup, network namespace or state folder left
	$(PY) -m tfmw.devcluster down

.PHONY: deploy
deploy: setup-tools ## Install or upgrade ENV's release on the current kube context
	$(TFMW) deploy $(TARGET_ARGS) $(GUARD_ARG) $(RENDER_ARGS) $(if $(TIMEOUT),--timeout $(TIMEOUT)) $(if $(UNSCHEDULABLE_GRACE),--unschedulable-grace $(UNSCHEDULABLE_GRACE)) $(if $(DRY_RUN),--dry-run)

.PHONY: diff
diff: setup-tools ## Show what deploy would change (rendered manifests vs. the deployed release)
	$(TFMW) diff $(TARGET_ARGS) $(RENDER_ARGS)

.PHONY: status
status: setup-tools ## Release state and per-worker progress
	$(TFMW) status $(TARGET_ARGS)

.PHONY: logs
logs: setup-tools ## Follow every worker's log, each line prefixed with its pod
	$(TFMW) logs $(TARGET_ARGS)

.PHONY: suspend
suspend: setup-tools ## Stop ENV's run at a checkpoint and remove its workers (GPUs freed); the run and its storage stay
	$(TFMW) suspend $(TARGET_ARGS) $(GUARD_ARG)

.PHONY: resume
resume: setup-tools ## Bring a suspended run's workers back: it goes on from its checkpoint
	$(TFMW) resume $(TARGET_ARGS) $(GUARD_ARG) $(if $(TIMEOUT),--timeout $(TIMEOUT))

.PHONY: retry
retry: setup-tools ## Train ENV's Failed run again from its last checkpoint, once the cause is fixed
	$(TFMW) retry $(TARGET_ARGS) $(GUARD_ARG) $(if $(TIMEOUT),--timeout $(TIMEOUT))

.PHONY: undeploy
undeploy: setup-tools ## Uninstall the release (shared storage is kept)
	$(TFMW) undeploy $(TARGET_ARGS) $(GUARD_ARG)

.PHONY: bench
bench: setup ## Measure the performance figures into docs/benchmarks.md (QUICK=1 for a short run; PEERS=1 adds the TFJob/JobSet figures)
	$(PY) -m tfmw.bench $(if $(QUICK),--quick) $(if $(filter 1,$(PEERS)),--peers)

.PHONY: gpu-check
gpu-check: $(VENV_STAMP) ## On a GPU host: the built-in trainer on GPU 0, 1 worker (NCCL) then 2 sharing it (RING); GPU_PY=a python whose TensorFlow has CUDA (docs/image.md)
	$(PY) -m tfmw.bench.gpucheck $(if $(GPU_PY),--python $(GPU_PY))

.PHONY: image
image: $(VENV_STAMP) ## Build the worker image (VARIANT=gpu|cpu, IMAGE=registry/name, BASE=debian, PUSH=1) with docker or podman
	$(PY) -m tfmw.image $(if $(VARIANT),--variant $(VARIANT)) $(if $(IMAGE),--image $(IMAGE)) $(if $(BASE),--base $(BASE)) $(if $(BASE_IMAGE),--base-image $(BASE_IMAGE)) $(if $(BASE_TAG),--base-tag $(BASE_TAG)) $(if $(filter 1,$(PUSH)),--push)

.PHONY: chart-package
chart-package: setup-tools ## Package the chart into build/charts/ (its CHANGELOG section and changes annotation checked)
	$(PY) -m tfmw.chart.package

.PHONY: chart-push
chart-push: setup-tools ## Package the chart and push it to REGISTRY=oci://<registry>/<path> (REGISTRY_CA=<file>)
	$(PY) -m tfmw.chart.package --push "$(REGISTRY)" $(if $(REGISTRY_CA),--ca-file $(REGISTRY_CA))

.PHONY: clean
clean: ## Remove local run state and build output (keeps the venv and tools)
	rm -rf .local-runs build
