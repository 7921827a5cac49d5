"""scripts/tfmw/chart/helmkit.py: finding the binaries, helm's version, `helm template`, helm's errors as one
line, built-in API groups and strict validation. The pure parts on made-up input; version and
template with the real pinned Helm 4 and Helm 3 (the `helm` fixture runs those tests with each)."""

from __future__ import annotations

from pathlib import Path

import chartkit
import pytest

from tfmw.chart import helmkit
from tfmw.chart.helmkit import ToolError


def executable(path: Path, script: str = "exit 0") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)
    return path


# ---------------------------------------------------------------- finding binaries


@pytest.fixture
def bare_env(monkeypatch, tmp_path):
    """No $HELM/$HELM3/$KUBECTL and an empty PATH: only what a test puts there is found."""
    for variable in ("HELM", "HELM3", "KUBECTL"):
        monkeypatch.delenv(variable, raising=False)
    path_dir = tmp_path / "path"
    path_dir.mkdir()
    monkeypatch.setenv("PATH", str(path_dir))
    return path_dir


def test_find_tool_takes_the_argument_then_the_variable_then_the_pinned_then_path(bare_env, tmp_path, monkeypatch):
    pinned = executable(tmp_path / "pinned" / "helm")
    on_path = executable(bare_env / "helm")
    assert helmkit.find_tool("helm", pinned=tmp_path / "nowhere" / "helm") == str(on_path)
    assert helmkit.find_tool("helm", pinned=pinned) == str(pinned)
    from_env = executable(tmp_path / "env" / "helm")
    monkeypatch.setenv("HELM", str(from_env))
    assert helmkit.find_tool("helm", pinned=pinned) == str(from_env)
    explicit = executable(tmp_path / "arg" / "helm")
    assert helmkit.find_tool("helm", explicit, pinned=pinned) == str(explicit)


def test_find_helm3_and_kubectl_read_their_own_variables(bare_env, tmp_path, monkeypatch):
    helm3 = executable(tmp_path / "h3" / "helm3")
    kubectl = executable(tmp_path / "k" / "kubectl")
    monkeypatch.setenv("HELM3", str(helm3))
    monkeypatch.setenv("KUBECTL", str(kubectl))
    assert helmkit.find_helm3() == str(helm3)
    assert helmkit.find_kubectl() == str(kubectl)


def test_a_named_binary_that_is_not_there_is_refused_naming_where_it_came_from(bare_env, monkeypatch):
    monkeypatch.setenv("HELM", "/nonexistent/helm")
    with pytest.raises(ToolError, match=r"helm not found: /nonexistent/helm \(from HELM\).*make setup") as err:
        helmkit.find_helm()
    assert err.value.exit_code == 127
    with pytest.raises(ToolError, match=r"kubectl not found: /nope \(from argument\)"):
        helmkit.find_kubectl("/nope")


def test_no_binary_anywhere_says_how_to_get_one(bare_env, tmp_path):
    with pytest.raises(ToolError, match=r"helm not found: not at .*missing/helm nor on PATH; run `make setup`") as err:
        helmkit.find_tool("helm", pinned=tmp_path / "missing" / "helm")
    assert err.value.exit_code == 127


def test_the_pinned_binaries_are_in_tools_bin(bare_env):
    assert helmkit.find_helm() == str(helmkit.TOOLS_BIN / "helm")
    assert helmkit.find_helm3() == str(helmkit.TOOLS_BIN / "helm3")
    assert helmkit.find_kubectl() == str(helmkit.TOOLS_BIN / "kubectl")


# ---------------------------------------------------------------- version


def test_helm_version_and_major_of_the_pinned_binaries():
    assert helmkit.helm_version(helmkit.find_helm()).startswith("v4.")
    assert helmkit.helm_major(helmkit.find_helm()) == 4
    assert helmkit.helm_version(helmkit.find_helm3()).startswith("v3.")
    assert helmkit.helm_major(helmkit.find_helm3()) == 3


@pytest.mark.parametrize("version,major", [("v4.1.4", 4), ("v3.17.2", 3), ("3.9.0\n", 3)])
def test_major_of_a_supported_version(version, major):
    assert helmkit.major_of(version) == major


@pytest.mark.parametrize(
    "version,message",
    [
        ("v5.0.0", r"helm v5\.0\.0 at /h is not supported: use Helm 3\.x or 4\.x"),
        ("v2.17.0", r"helm v2\.17\.0 at /h is not supported"),
        ("dev build", r"cannot tell the version of helm at /h: it says 'dev build'"),
    ],
)
def test_major_of_anything_else_is_refused(version, message):
    with pytest.raises(ToolError, match=message):
        helmkit.major_of(version, "/h")


def test_helm_version_of_a_failing_or_missing_binary_is_one_line(tmp_path):
    broken = executable(tmp_path / "helm", "echo 'Error: something broke' >&2; exit 1")
    with pytest.raises(ToolError, match=r"cannot tell the version of helm at .*helm: something broke"):
        helmkit.helm_version(str(broken))
    with pytest.raises(ToolError, match=r"cannot run") as err:
        helmkit.helm_version(str(tmp_path / "absent"))
    assert err.value.exit_code == 127
    too_new = executable(tmp_path / "helm5", "echo v5.0.1")
    with pytest.raises(ToolError, match="not supported"):
        helmkit.helm_major(str(too_new))


# ---------------------------------------------------------------- helm template


def test_template_args_keep_the_order_helm_layers_in():
    args = helmkit.template_args(
        "/c",
        "rel",
        "ns",
        ["a.yaml", Path("b.yaml")],
        ["x=1", "y=2"],
        kube_version="1.30",
        show_only=["templates/s.yaml"],
    )
    assert args == [
        "template",
        "rel",
        "/c",
        "--namespace",
        "ns",
        "--kube-version",
        "1.30",
        "--values",
        "a.yaml",
        "--values",
        "b.yaml",
        "--set",
        "x=1",
        "--set",
        "y=2",
        "--show-only",
        "templates/s.yaml",
    ]
    assert helmkit.template_args("/c", "rel", "ns") == ["template", "rel", "/c", "--namespace", "ns"]


@pytest.fixture
def probe_chart(tmp_path) -> Path:
    """A chart that prints what helm gave its templates."""
    chart = tmp_path / "probe"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: probe\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text("a: default\nb: default\nc: default\n")
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n"
        "  namespace: {{ .Release.Namespace }}\n"
        "data:\n  kube: {{ .Capabilities.KubeVersion.Version | quote }}\n"
        "  values: {{ toJson .Values | quote }}\n"
    )
    (chart / "templates" / "other.yaml").write_text("apiVersion: v1\nkind: Secret\nmetadata:\n  name: other\n")
    return chart


def test_helm_template_passes_files_sets_version_and_namespace(helm, probe_chart, tmp_path):
    import json

    first, second = tmp_path / "1.yaml", tmp_path / "2.yaml"
    first.write_text("a: first\nb: first\n")
    second.write_text("b: second\n")
    proc = helmkit.helm_template(
        helm,
        probe_chart,
        "rel",
        "ns1",
        [first, second],
        ["c=set"],
        kube_version="1.30",
        show_only=["templates/cm.yaml"],
    )
    assert proc.returncode == 0, proc.stderr
    (cm,) = helmkit.parse_manifests(proc.stdout)
    assert cm["metadata"] == {"name": "rel", "namespace": "ns1"}
    assert cm["data"]["kube"] in ("v1.30", "v1.30.0")  # Helm 4 and Helm 3 spell it so
    assert json.loads(cm["data"]["values"]) == {"a": "first", "b": "second", "c": "set"}


def test_helm_template_failure_comes_back_for_the_caller(helm, probe_chart):
    proc = helmkit.helm_template(helm, probe_chart, "rel", "ns", sets=["no-equals-sign"])
    assert proc.returncode != 0 and "no-equals-sign" in helmkit.helm_error_line(proc.stderr)


def test_helm_template_with_a_missing_binary_is_a_tool_error(tmp_path, probe_chart):
    with pytest.raises(ToolError) as err:
        helmkit.helm_template(str(tmp_path / "no-helm"), probe_chart)
    assert err.value.exit_code == 127


def test_parse_manifests_drops_empty_documents_and_refuses_non_objects():
    text = "---\n# Source: x\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n"
    assert helmkit.parse_manifests(text) == [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}]
    with pytest.raises(ValueError, match="not a Kubernetes object"):
        helmkit.parse_manifests("just: values\n")


# ---------------------------------------------------------------- helm's errors


def test_helm_error_line_is_the_last_error_without_its_prefix():
    stderr = "WARNING: x\nError: first\nsome detail\nError: the one   that\n  counts\n"
    assert helmkit.helm_error_line(stderr) == "the one that"
    assert helmkit.helm_error_line(stderr.encode()) == "the one that"
    assert helmkit.helm_error_line("no prefix here\nlast line\n") == "last line"
    assert helmkit.helm_error_line("") == "no output"


def test_chart_refusal_keeps_every_problem_of_validate_values(helm):
    """The chart's own refusal, from the real helm: its `fail` puts one problem per line."""
    stderr = chartkit.template_error(helm, sets=("containerSecurityContext.privileged=true", "storage.mountPath=/tmp"))
    refusal = helmkit.chart_refusal(stderr)
    assert refusal.startswith("writableDirs[0]=/tmp: ") and "; containerSecurityContext.privileged=true: " in refusal
    assert "execution error" not in refusal and "--debug" not in refusal and "\n" not in refusal
    assert helmkit.chart_refusal(stderr.encode()) == refusal
    assert helmkit.chart_refusal("Error: execution error at (c/t.yaml:3:1): just one\n") == "just one"
    assert helmkit.chart_refusal("Error: YAML parse error on c/templates/x.yaml\n") is None
    assert helmkit.chart_refusal("") is None


# ---------------------------------------------------------------- API groups and validation


@pytest.mark.parametrize(
    "api_version", ["v1", "apps/v1", "policy/v1", "batch/v1", "networking.k8s.io/v1", "scheduling.k8s.io/v1"]
)
def test_builtin_api_groups(api_version):
    assert helmkit.is_builtin_api(api_version)


@pytest.mark.parametrize(
    "api_version",
    [
        "scheduling.x-k8s.io/v1alpha1",
        "scheduling.volcano.sh/v1beta1",
        "monitoring.coreos.com/v1",
        "kueue.x-k8s.io/v1beta1",
    ],
)
def test_custom_api_groups(api_version):
    assert not helmkit.is_builtin_api(api_version)


def test_key_path_is_written_as_in_yaml():
    assert helmkit.key_path(["spec", "ports", 0, "port"]) == "spec.ports[0].port"
    assert helmkit.key_path([]) == "(top level)"


SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "svc"},
    "spec": {"clusterIP": "None", "ports": [{"port": 2222}]},
}


@pytest.mark.parametrize("version", helmkit.KUBERNETES_VERSIONS)
def test_a_valid_object_passes_for_every_supported_version(version):
    assert helmkit.validate_objects([SERVICE], version).problems == []


def test_validation_is_strict_and_names_the_object_and_key():
    unknown_field = {**SERVICE, "spec": {**SERVICE["spec"], "portz": []}}
    wrong_type = {**SERVICE, "metadata": {"name": "typed"}, "spec": {"ports": [{"port": "x"}]}}
    problems = helmkit.validate_objects([unknown_field, wrong_type], "1.35").problems
    assert [(p.object, p.where) for p in problems] == [("Service/svc", "spec"), ("Service/typed", "spec.ports[0].port")]
    assert "'portz' was unexpected" in problems[0].message
    assert str(problems[1]) == "Service/typed: spec.ports[0].port: 'x' is not of type 'integer'"


def test_a_builtin_api_the_version_no_longer_serves_is_a_problem():
    psp = {"apiVersion": "policy/v1beta1", "kind": "PodSecurityPolicy", "metadata": {"name": "p"}, "spec": {}}
    (problem,) = helmkit.validate_objects([psp], "1.30").problems
    assert (problem.object, problem.where) == ("PodSecurityPolicy/p", "apiVersion")
    assert "policy/v1beta1 PodSecurityPolicy is not served by Kubernetes 1.30" in problem.message


def test_custom_resources_are_set_apart_not_checked():
    """kubernetes-validate would check this PodGroup against the unrelated built-in group's schema."""
    pod_group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "pg"},
        "spec": {"minMember": 2, "anything": True},
    }
    checked = helmkit.validate_objects([pod_group, pod_group, SERVICE], "1.35")
    assert checked.problems == [] and checked.custom == [pod_group, pod_group]
    assert checked.custom_kinds() == ["scheduling.x-k8s.io/v1alpha1 PodGroup"]


def test_an_unknown_kubernetes_version_is_refused():
    with pytest.raises(ToolError, match=r"--kube-version 9\.99 is not known to kubernetes-validate"):
        helmkit.validate_objects([SERVICE], "9.99")
