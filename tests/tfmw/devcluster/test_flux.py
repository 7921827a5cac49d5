"""Flux on the local cluster, the parts that need no cluster: the pinned pair of controllers and
how they are started (the GitOps cluster tests run them for real:
tests/e2e/cluster/test_cluster_gitops.py)."""

from __future__ import annotations

from pathlib import Path

from tfmw.devcluster import build, build_flux, controlplane, flux, onebinary


def test_the_pins_are_a_matched_pair_helm_controller_needs_no_newer_source_api_than_is_pinned():
    source = onebinary.read_pins(build_flux.SOURCE_CONTROLLER).version
    helm = onebinary.read_pins(build_flux.HELM_CONTROLLER).version
    assert onebinary.install_name(build_flux.HELM_CONTROLLER, onebinary.read_pins(build_flux.HELM_CONTROLLER)) == (
        f"flux-helm-controller-{helm[1:]}"
    )
    requires = build.parse_gomod((build_flux.HELM_CONTROLLER.gomod / "go.mod").read_text()).requires
    api = requires["github.com/fluxcd/source-controller/api"]
    assert build.semver_parts(api)[:2] == build.semver_parts(source)[:2], (api, source)
    assert build.semver_parts(api) <= build.semver_parts(source), (api, source)


def test_each_wrapper_repeats_its_controllers_go_digest_replace():
    # a dependency's replace directives do not apply to the module requiring it
    for spec in build_flux.CONTROLLERS:
        replaces = build.parse_gomod((spec.gomod / "go.mod").read_text()).replaces
        assert "github.com/opencontainers/go-digest" in replaces, spec.name


def test_the_controllers_listen_on_loopback_only_without_leader_election():
    ports = {"metrics": 1001, "health": 1002, "storage": 1003}
    source = flux.controller_args(Path("/b/source-controller"), ports, Path("/state/flux/storage"))
    assert source[0] == "/b/source-controller"
    assert "--enable-leader-election=false" in source and "--watch-all-namespaces=true" in source
    addresses = [a.split("=", 1)[1] for a in source if a.endswith(("-addr=127.0.0.1:1001", "1002", "1003"))]
    assert addresses == ["127.0.0.1:1001", "127.0.0.1:1002", "127.0.0.1:1003", "127.0.0.1:1003"]
    assert "--storage-path=/state/flux/storage" in source
    helm = flux.controller_args(Path("/b/helm-controller"), ports, None)
    assert not [a for a in helm if a.startswith("--storage")]


def test_flux_on_no_running_cluster_is_refused_in_one_line(tmp_path, capsys):
    assert flux.main(["start", "--state", str(tmp_path)]) == 1
    assert capsys.readouterr().err == f"flux: error: no running cluster at {tmp_path} (start one with make cluster)\n"


def test_make_cluster_flux_that_cannot_start_says_the_cluster_runs_in_one_line(tmp_path, capsys, monkeypatch):
    from tfmw.devcluster import cli as cluster_cli

    class State:
        kubeconfig = tmp_path / "kubeconfig"

    monkeypatch.setattr(cluster_cli.controlplane, "preflight", lambda nodes, gpus: None)
    monkeypatch.setattr(cluster_cli.workerimage, "images_for_up", lambda state, base, no_image: [])
    monkeypatch.setattr(cluster_cli.controlplane, "up", lambda state, **kw: State())
    monkeypatch.setattr(cluster_cli.registry, "start", lambda state: None)

    def refused(state):
        raise flux.FluxError("helm-controller did not become ready on http://127.0.0.1:1/readyz")

    monkeypatch.setattr(cluster_cli.flux, "start", refused)
    code = cluster_cli.main(["up", "--state", str(tmp_path / "s"), "--no-image", "--flux"])
    err = capsys.readouterr().err
    assert code == 4 and err == (
        "make cluster: the cluster runs, but Flux is not started: "
        "helm-controller did not become ready on http://127.0.0.1:1/readyz\n"
    )


def test_the_cluster_stops_both_controllers_with_it():
    assert {spec.name for spec in build_flux.CONTROLLERS} <= set(controlplane.HOST_ADDONS)
