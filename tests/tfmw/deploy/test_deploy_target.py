"""One release per environment: the overlay's `target` block names the release, namespace and
kube context (tfmw.chart.target), and deploy (its dry run too), undeploy, suspend, resume and
retry refuse a cluster the environment is not meant for (tfmw.deploy.context). No cluster: the
kubeconfigs point at closed loopback ports or at addresses nothing here dials."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from deploykit import REPO, assert_one_line_error, closed_port, run_cli

from tfmw.chart import helmkit, render
from tfmw.chart.target import Target, given_kube_context, naming_sources, overlay_kube_context, target_of
from tfmw.deploy import context

STAND_IN_DIGEST = "sha256:" + "0" * 64  # an image digest where an overlay asks for one (prod)


def test_every_environment_is_its_own_release_in_its_own_namespace():
    pinned = [f"image.digest={STAND_IN_DIGEST}"]  # what prod's render asks for
    rendered = {env: render.prepare(env, pinned) for env in render.known_envs()}
    targets = {env: r.target for env, r in rendered.items()}
    assert {(t.release, t.namespace) for t in targets.values()} == {
        ("tf-multiworker", "default"),
        ("tf-multiworker-dev", "tfmw-dev"),
        ("tf-multiworker-staging", "tfmw-staging"),
        ("tf-multiworker-prod", "tfmw-prod"),
    }
    # every overlay says where it goes: a context of its own, any on purpose, or a local cluster only
    assert {env: t.kube_context for env, t in targets.items()} == {
        "local": "@local",
        "dev": "*",
        "staging": "staging",
        "prod": "prod",
    }
    # The run id follows the release, so no two environments share a run directory.
    run_ids = {
        env: next(
            e["value"]
            for o in rendered[env].find("StatefulSet")
            for e in o["spec"]["template"]["spec"]["containers"][0]["env"]
            if e["name"] == "TFMW_RUN_ID"
        )
        for env in targets
    }
    assert run_ids == {env: t.release for env, t in targets.items()}


def test_the_command_line_wins_and_says_so():
    values = {"target": {"release": "r-dev", "namespace": "ns-dev", "kubeContext": "dev"}}
    assert target_of(values, "values/dev.yaml") == Target(
        "r-dev", "ns-dev", "dev", "values/dev.yaml", "values/dev.yaml target"
    )
    mixed = target_of(values, "values/dev.yaml", namespace="other")
    assert (mixed.release, mixed.namespace, mixed.origin) == (
        "r-dev",
        "other",
        "release: values/dev.yaml target, namespace: --namespace",
    )
    assert target_of({}, "values/x.yaml") == Target(
        "tf-multiworker", "default", "", "values/x.yaml", "the chart's default"
    )


def test_the_origin_names_the_last_source_that_named_the_release_and_namespace():
    dev = ("values/dev.yaml", {"target": {"release": "r-dev", "namespace": "ns-dev"}})
    team = ("team.yaml", {"target": {"release": "team-run"}, "workers": {"replicas": 2}})
    assert naming_sources([dev]) == {"release": "values/dev.yaml target", "namespace": "values/dev.yaml target"}
    # a VALUES= file after the overlay names what it sets, the overlay what it still gives
    assert naming_sources([dev, team]) == {"release": "team.yaml target", "namespace": "values/dev.yaml target"}
    # a null deletes the key (helm), and `target: null` the whole block: the chart's default
    assert naming_sources([dev, ("clear.yaml", {"target": {"namespace": None}})]) == {
        "release": "values/dev.yaml target"
    }
    assert naming_sources([dev, ("clear.yaml", {"target": None})]) == {}
    # a --set / --set-string of the key comes after every file
    assert naming_sources([dev, team], [("--set-string", "target.namespace"), ("--set", "workers.replicas")]) == {
        "release": "team.yaml target",
        "namespace": "--set-string target.namespace",
    }
    values = {"target": {"release": "team-run", "namespace": "ns-dev"}}
    named = target_of(values, "values/dev.yaml", named_in=naming_sources([dev, team]))
    assert named.origin == "release: team.yaml target, namespace: values/dev.yaml target"
    # the command line still wins over every file
    given = target_of(values, "values/dev.yaml", "r", "n", naming_sources([dev, team]))
    assert given.origin == "release: --release, namespace: --namespace"


def test_a_values_file_that_names_the_release_is_named_in_the_render_line(tmp_path):
    team = tmp_path / "team.yaml"
    team.write_text("target:\n  release: team-run\n  namespace: team-ns\n")
    target = render.prepare("dev", values_files=[team]).target
    assert (target.release, target.namespace, target.origin) == ("team-run", "team-ns", f"{team} target")


PROD = Target("tf-multiworker-prod", "tfmw-prod", "prod", "values/prod.yaml", "values/prod.yaml target")
LOCAL = Target("tf-multiworker", "default", "@local", "values/local.yaml", "values/local.yaml target")
DEV = Target("tf-multiworker-dev", "tfmw-dev", "*", "values/dev.yaml", "values/dev.yaml target")
UNNAMED = Target("r", "ns", "", "values/qa.yaml", "values/qa.yaml target")
REMOTE = context.InUse("gke-ml-dev", "https://34.1.2.3")


def test_a_context_other_than_the_overlays_is_refused_naming_both():
    with pytest.raises(render.ToolError) as refused:
        context.check(PROD, REMOTE, env_named=True, any_context=False, verb="deploy")
    message = str(refused.value)
    assert message.startswith(
        "values/prod.yaml is meant for kube context 'prod' (target.kubeContext), and the context in use is "
        "'gke-ml-dev' (server https://34.1.2.3)"
    )
    assert "KUBE_CONTEXT=prod" in message and "ANY_CONTEXT=1" in message and refused.value.exit_code == 2
    pinned = context.check(PROD, context.InUse("prod", "https://34.9.9.9"), env_named=True, any_context=False, verb="x")
    assert pinned == "prod"  # every helm call after the check goes to the context checked
    assert context.check(PROD, REMOTE, env_named=True, any_context=True, verb="deploy") == "gke-ml-dev"  # override
    # no kubeconfig to read: nothing to refuse, and helm is still pointed at the overlay's context
    assert context.check(PROD, None, env_named=True, any_context=False, verb="deploy") == "prod"


def test_an_overlay_that_names_no_context_is_refused_saying_how_to_name_it():
    for where in (REMOTE, context.InUse("kind-x", ""), None):
        with pytest.raises(render.ToolError) as refused:
            context.check(UNNAMED, where, env_named=True, any_context=False, verb="suspend")
        message = str(refused.value)
        assert message.startswith("values/qa.yaml names no kube context (target.kubeContext)")
        assert "`kubeContext: <your cluster's context>`" in message and '"*"' in message and '"@local"' in message
    assert context.check(UNNAMED, REMOTE, env_named=True, any_context=True, verb="deploy") == "gke-ml-dev"


def test_star_means_any_context_and_pins_the_one_in_use():
    assert context.check(DEV, REMOTE, env_named=True, any_context=False, verb="deploy") == "gke-ml-dev"
    assert context.check(DEV, None, env_named=True, any_context=False, verb="deploy") is None


def test_at_local_means_a_local_cluster_only_whether_or_not_env_was_named():
    with pytest.raises(render.ToolError) as refused:
        context.check(LOCAL, REMOTE, env_named=True, any_context=False, verb="retry")
    assert str(refused.value).startswith(
        'values/local.yaml is meant for a local cluster (target.kubeContext "@local"), and the context in use, '
        "'gke-ml-dev' (server https://34.1.2.3), is not one"
    )
    assert "ANY_CONTEXT=1 to retry" in str(refused.value)
    kind = context.InUse("kind-ml", "https://172.18.0.2:6443")
    assert context.check(LOCAL, kind, env_named=True, any_context=False, verb="deploy") == "kind-ml"


def test_a_set_that_changes_or_clears_the_context_needs_any_context():
    cleared = Target(PROD.release, PROD.namespace, "", PROD.overlay, PROD.origin)
    with pytest.raises(render.ToolError) as refused:
        context.check_set(cleared, "prod", any_context=False)
    assert str(refused.value).startswith(
        "SET changes target.kubeContext from 'prod' in values/prod.yaml to nothing"
    ) and "ANY_CONTEXT=1" in str(refused.value)
    with pytest.raises(render.ToolError, match=r"from \"\*\" \(any context\) in values/dev.yaml to 'prod'"):
        context.check_set(Target(DEV.release, DEV.namespace, "prod", DEV.overlay, DEV.origin), "*", any_context=False)
    context.check_set(PROD, "prod", any_context=False)  # unchanged
    context.check_set(cleared, "prod", any_context=True)  # said on purpose
    context.check_set(UNNAMED, None, any_context=False)  # nothing named, nothing changed


def test_the_overlay_files_own_context_is_read_before_any_set(tmp_path):
    assert overlay_kube_context(REPO / "values" / "prod.yaml") == "prod"
    assert overlay_kube_context(REPO / "values" / "dev.yaml") == "*"
    (tmp_path / "qa.yaml").write_text("target:\n  release: r\n")
    assert overlay_kube_context(tmp_path / "qa.yaml") is None


def test_no_env_sends_the_local_overlay_only_to_a_local_cluster():
    with pytest.raises(render.ToolError) as refused:
        context.check(LOCAL, REMOTE, env_named=False, any_context=False, verb="undeploy")
    assert "no ENV given" in str(refused.value) and "make undeploy ENV=dev" in str(refused.value)


@pytest.mark.parametrize(
    "name,server,local",
    [
        ("tfmw-local", "https://10.200.0.1:6443", True),
        ("kind-ml", "https://172.18.0.2:6443", True),
        ("k3d-dev", "https://0.0.0.0:6550", True),
        ("minikube", "https://192.168.49.2:8443", True),
        ("any", "https://127.0.0.1:6443", True),
        ("any", "https://[::1]:6443", True),
        ("any", "https://api.localhost:6443", True),
        ("gke_prj_zone_ml", "https://34.1.2.3", False),
        ("eks", "https://ABC.gr7.eu-west-1.eks.amazonaws.com", False),
    ],
)
def test_what_counts_as_a_local_cluster(name, server, local):
    assert context.is_local(context.InUse(name, server)) is local


def kubeconfig(tmp_path, current: str) -> str:
    """Two contexts on closed loopback ports, `current` selected: nothing answers, nothing is dialled."""
    port = closed_port()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"https://10.255.255.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": n, "context": {"cluster": "c", "user": "u"}} for n in ("gke-ml-dev", "prod", "staging")],
        "current-context": current,
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return str(path)


PINNED = ("--set", f"image.digest={STAND_IN_DIGEST}")  # prod's render wants its image pinned


@pytest.mark.parametrize(
    "command",
    [["deploy", *PINNED], ["deploy", "--dry-run", *PINNED], ["undeploy"], ["suspend"], ["resume"], ["retry"]],
)
@pytest.mark.parametrize("env", ["prod", "staging"])
def test_the_cli_refuses_a_wrong_context_before_any_cluster_call(tmp_path, command, env):
    proc = run_cli(command[0], "--env", env, *command[1:], env={"KUBECONFIG": kubeconfig(tmp_path, "gke-ml-dev")})
    assert_one_line_error(proc, command[0], f"meant for kube context '{env}'", "'gke-ml-dev'")
    assert proc.returncode == 2


def dry_run_command(proc) -> list[str]:
    assert proc.returncode == 0, proc.stderr
    return next(line for line in proc.stdout.splitlines() if line.startswith("  ")).split()


def test_a_dry_run_prints_helm_at_the_context_checked(tmp_path):
    config = {"KUBECONFIG": kubeconfig(tmp_path, "gke-ml-dev")}
    prod = run_cli("deploy", "--env", "prod", "--dry-run", *PINNED, "--kube-context", "prod", env=config)
    assert dry_run_command(prod)[-2:] == ["--kube-context", "prod"]
    anywhere = run_cli("deploy", "--env", "prod", "--dry-run", *PINNED, "--any-context", env=config)
    assert dry_run_command(anywhere)[-2:] == ["--kube-context", "gke-ml-dev"]


@pytest.mark.parametrize("change", ["target.kubeContext=", "target.kubeContext=gke-ml-dev"])
def test_a_set_that_changes_the_context_is_refused_without_any_context(tmp_path, change):
    config = {"KUBECONFIG": kubeconfig(tmp_path, "gke-ml-dev")}
    proc = run_cli(
        "deploy", "--env", "prod", "--dry-run", "--set", f"image.digest={STAND_IN_DIGEST} {change}", env=config
    )
    assert_one_line_error(
        proc, "deploy", "SET changes target.kubeContext from 'prod' in values/prod.yaml", "ANY_CONTEXT=1"
    )
    allowed = run_cli(
        "deploy",
        "--env",
        "prod",
        "--dry-run",
        "--any-context",
        "--set",
        f"image.digest={STAND_IN_DIGEST} {change}",
        env=config,
    )
    assert dry_run_command(allowed)[-2:] == ["--kube-context", "gke-ml-dev"]


def test_a_values_file_that_changes_the_context_is_refused_like_a_set(tmp_path):
    """VALUES= files are layered after the overlay: one that changes or clears its kubeContext is
    the guard changed, as with SET=, and needs ANY_CONTEXT=1."""
    with pytest.raises(render.ToolError) as refused:
        context.check_files(PROD, "prod", [("team.yaml", None), ("ctx.yaml", "gke-ml-dev")], any_context=False)
    assert str(refused.value).startswith(
        "values file ctx.yaml changes target.kubeContext from 'prod' in values/prod.yaml to 'gke-ml-dev'"
    ) and "ANY_CONTEXT=1" in str(refused.value)
    with pytest.raises(render.ToolError, match="to nothing"):
        context.check_files(PROD, "prod", [("clear.yaml", "")], any_context=False)
    context.check_files(PROD, "prod", [("same.yaml", "prod"), ("none.yaml", None)], any_context=False)
    context.check_files(PROD, "prod", [("ctx.yaml", "gke-ml-dev")], any_context=True)
    files = {"ctx.yaml": "target:\n  kubeContext: x\n", "null.yaml": "target:\n  kubeContext: null\n"}
    files |= {"gone.yaml": "target: null\n", "other.yaml": "target:\n  release: r\n", "none.yaml": "a: 1\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    given = {name: given_kube_context(tmp_path / name) for name in files}
    assert given == {"ctx.yaml": "x", "null.yaml": "", "gone.yaml": "", "other.yaml": None, "none.yaml": None}
    config = {"KUBECONFIG": kubeconfig(tmp_path, "gke-ml-dev")}
    common = ("deploy", "--env", "prod", "--dry-run", *PINNED, "-f", str(tmp_path / "ctx.yaml"))
    proc = run_cli(*common, env=config)
    assert_one_line_error(proc, "deploy", f"values file {tmp_path / 'ctx.yaml'} changes target.kubeContext")
    assert proc.returncode == 2
    assert dry_run_command(run_cli(*common, "--any-context", env=config))[-2:] == ["--kube-context", "gke-ml-dev"]


def test_an_overlay_naming_no_context_is_refused_by_deploy_but_renders(tmp_path):
    values = tmp_path / "values"
    values.mkdir()
    (values / "qa.yaml").write_text("target:\n  release: qa\n  namespace: qa\n")
    config = {"KUBECONFIG": kubeconfig(tmp_path, "gke-ml-dev")}
    common = ("--env", "qa", "--values-dir", str(values))
    proc = run_cli("deploy", *common, "--dry-run", env=config)
    assert_one_line_error(proc, "deploy", "values/qa.yaml names no kube context", 'kubeContext: "*"')
    assert proc.returncode == 2
    rendered = run_cli("template", *common, "--output", str(tmp_path / "m.yaml"), env=config)
    assert rendered.returncode == 0, rendered.stderr


def test_a_kube_version_below_the_charts_is_refused():
    refusal = helmkit.kube_version_refusal(">=1.27.0-0", "1.25")
    assert refusal == "Kubernetes 1.25 is outside the chart's kubeVersion '>=1.27.0-0' (Chart.yaml)"
    assert helmkit.kube_version_refusal(">=1.27.0-0", "1.27") is None
    assert helmkit.kube_version_refusal(">=1.27.0-0", "v1.35.2") is None
    assert helmkit.kube_version_refusal(">=1.20, <1.30", "1.30") is not None
    assert helmkit.kube_version_refusal("<1.20 || >=1.27", "1.28") is None
    assert helmkit.kube_version_refusal("~1.27", "1.10") is None  # not read here: helm judges it
    proc = run_cli("template", "--env", "dev", "--kube-version", "1.25", "--output", "/dev/null")
    line = assert_one_line_error(proc, "template", "--kube-version 1.25", "kubeVersion '>=1.27.0-0'", "KUBE_VERSION=")
    assert "valid for" not in proc.stdout and proc.returncode == 2, line


@pytest.mark.parametrize("verb", ["deploy", "undeploy"])
def test_the_cli_with_no_env_asks_for_one_on_a_remote_cluster(tmp_path, verb):
    proc = run_cli(verb, env={"KUBECONFIG": kubeconfig(tmp_path, "gke-ml-dev")})
    assert_one_line_error(proc, verb, "no ENV given", "'gke-ml-dev'", f"make {verb} ENV=dev")
    assert proc.returncode == 2


@pytest.mark.parametrize(
    "variables,passed,absent",
    [
        ([], ["tfmw deploy"], ["--env", "--release", "--namespace", "--any-context"]),
        (["ENV=dev"], ["--env dev"], ["--release", "--namespace"]),
        (["ENV=prod", "NAMESPACE=x", "ANY_CONTEXT=1"], ["--env prod", "--namespace x", "--any-context"], ["--release"]),
        (
            ["SET=a=1", "SET_STRING=b=true", "KUBE_VERSION=1.30"],
            ['--set "a=1"', '--set-string "b=true"', "--kube-version 1.30"],
            ["--set-file", "--values", "--set-json"],
        ),
    ],
)
def test_make_passes_only_what_was_given(variables, passed, absent):
    """`make deploy` without ENV must reach tfmw without --env: that is how tfmw knows no
    environment was named (and refuses a non-local cluster)."""
    proc = subprocess.run(
        ["make", "-s", "-n", "deploy", *variables], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    line = next(ln for ln in proc.stdout.splitlines() if "tfmw deploy" in ln)
    assert all(p in line for p in passed) and not any(f" {a} " in f"{line} " for a in absent), line
