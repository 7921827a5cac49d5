"""Issue 12 on the host path: `make template`, `make deploy` (also --dry-run) and `make local`
refuse bad values before anything runs, one line naming the key, exit 2; the Pod Security
Standards check (scripts/tfmw/chart/pss.py) runs on every rendered pod; SET reaches helm as helm's own
--set would."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from chartkit import STAND_IN_DIGEST
from deploykit import HELM3, HELM4, run_cli

from tfmw.chart import pss, render
from tfmw.chart.helmkit import ToolError
from tfmw.localrun import cli as local_cli

UNSAFE = "containerSecurityContext.privileged=true"


def one_line(proc) -> str:
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.parametrize("command", [["template"], ["deploy", "--dry-run"]])
@pytest.mark.parametrize(
    "sets, key",
    [
        (UNSAFE, "containerSecurityContext.privileged=true"),
        ("storage.mountPath=/tmp", "writableDirs[0]=/tmp"),
        (
            "workers.extraEnv[0].name=TFMW_LOOPBACK_PORTS workers.extraEnv[0].value=x",
            "workers.extraEnv[0].name=TFMW_LOOPBACK_PORTS",
        ),
        ("workers.podLabels.app\\.kubernetes\\.io/instance=x", "workers.podLabels.app.kubernetes.io/instance"),
        ("podDisruptionBudget.maxUnavailable=100", "podDisruptionBudget.maxUnavailable=100"),
    ],
)
def test_tfmw_refuses_before_anything_runs(command, sets, key, tmp_path):
    proc = run_cli(
        *command,
        "--env",
        "local",
        "--set",
        sets,
        "--output" if command == ["template"] else "--timeout",
        str(tmp_path / "m.yaml") if command == ["template"] else "1m",
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert key in one_line(proc)
    assert not (tmp_path / "m.yaml").exists()


def test_tfmw_names_every_problem_on_its_one_line():
    line = one_line(run_cli("template", "--env", "local", "--set", f"{UNSAFE} storage.mountPath=/tmp"))
    assert line.startswith("tfmw template: error: charts/tf-multiworker refused the values: writableDirs[0]=/tmp: ")
    assert "; containerSecurityContext.privileged=true: " in line


def test_a_schema_refusal_names_the_key_on_the_host_path():
    proc = run_cli("template", "--env", "local", "--set", "storage.mountPath='/shared\n  readOnly: true'")
    assert proc.returncode == 2
    assert "storage.mountPath" in one_line(proc)


def test_the_opt_in_renders_with_one_warning_line(tmp_path):
    out = tmp_path / "m.yaml"
    proc = run_cli("template", "--env", "local", "--set", f"security.allowUnsafe=true {UNSAFE}", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    line = one_line(proc)
    assert line.startswith("WARNING: security.allowUnsafe=true: ") and "privileged" in line
    sts = next(o for o in yaml.safe_load_all(out.read_text()) if o and o["kind"] == "StatefulSet")
    assert sts["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileged"] is True


@pytest.mark.parametrize("env", render.known_envs())
def test_every_overlay_renders_on_the_host_path_without_a_warning(env):
    rendered = render.prepare(env, [f"image.digest={STAND_IN_DIGEST}"] if env == "prod" else [])  # prod runs a digest
    assert rendered.warnings == []
    assert pss.all_violations(pss.pod_templates(rendered.objects)) == []


def test_make_local_refuses_before_starting_a_worker(tmp_path, capsys):
    code = local_cli.main(["--env", "local", "--set", UNSAFE, "--runs-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("make local: ")
    assert "containerSecurityContext.privileged=true" in err[0]
    assert not any(tmp_path.iterdir())  # nothing started, no run state


def _pod(spec_extra: dict) -> dict:
    spec = {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {"name": "c", "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}
        ],
    }
    spec.update(spec_extra)
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "w"},
        "spec": {"template": {"metadata": {}, "spec": spec}},
    }


def test_the_pss_check_refuses_what_the_chart_would_not_catch():
    """Defence in depth: a rendered pod with hostNetwork (no chart value renders it) is refused."""
    with pytest.raises(
        ToolError,
        match=r"violate Pod Security Standards restricted: StatefulSet/w: "
        r"host namespaces: spec.hostNetwork=true; .*security.allowUnsafe=true",
    ) as err:
        render.check_pod_security([_pod({"hostNetwork": True})], {})
    assert err.value.exit_code == 2 and "\n" not in str(err.value)
    assert render.check_pod_security([_pod({})], {}) == []
    (warning,) = render.check_pod_security([_pod({"hostPID": True})], {"security": {"allowUnsafe": True}})
    assert warning.startswith("WARNING: security.allowUnsafe=true: 1 violation(s)") and "hostPID" in warning


def test_pss_pod_templates_finds_every_pod_kind():
    objects = [
        _pod({}),
        {"kind": "Pod", "metadata": {"name": "p"}, "spec": {}},
        {"kind": "Service", "metadata": {"name": "s"}, "spec": {}},
    ]
    assert [name for name, _, _ in pss.pod_templates(objects)] == ["StatefulSet/w", "Pod/p"]


# ---------------------------------------------------------------- SET is split as helm splits it

ESCAPED = "workers.nccl.socketIfname=^lo\\,docker workers.podLabels.example\\.com/team=ml"


def test_set_keeps_backslashes_for_helms_own_parser():
    assert render.split_sets(ESCAPED) == [
        "workers.nccl.socketIfname=^lo\\,docker",
        "workers.podLabels.example\\.com/team=ml",
    ]
    assert render.split_sets(["a=x\\,y"]) == ["a=x\\,y"]
    assert render.split_sets("a='x\\,y z' b=\"q r\"") == ["a=x\\,y z", "b=q r"]
    assert render.split_sets("a=x\\ y") == ["a=x\\ y"]  # an escaped space does not split
    with pytest.raises(ToolError, match="no closing quotation"):
        render.split_sets("a='x")


def test_a_backslash_is_kept_with_the_character_after_it():
    chars = iter(",y")
    assert render._escape_pair("\\", chars, "a=x\\,y") == ["\\", ","]
    assert next(chars) == "y"
    with pytest.raises(ToolError, match="lone backslash"):
        render._escape_pair("\\", iter(""), "a=x\\")


def test_inside_quotes_only_the_closing_quote_ends_them():
    word: list[str] = []
    assert render._in_quotes("x", '"', word) == '"' and word == ["x"]
    assert render._in_quotes("'", '"', word) == '"' and word == ["x", "'"]
    assert render._in_quotes('"', '"', word) == "" and word == ["x", "'"]


@pytest.mark.parametrize("item", ["a=x\\", "a=x\\,y", "b=it's", "c=two words", "l.example\\.com/t=ml"])
def test_a_shell_quoted_item_comes_back_as_typed(item):
    """tests/e2e/cluster quote each item with shlex.quote: single quotes keep everything literal."""
    import shlex

    assert render.split_sets(shlex.quote(item)) == [item]


@pytest.mark.parametrize("helm", [HELM4, HELM3], ids=["helm4", "helm3"])
def test_escaped_set_equals_helm_template_set(helm):
    items = render.split_sets(ESCAPED)
    overlay = render.overlay_path("dev")  # GPU workers: NCCL_SOCKET_IFNAME is rendered
    ours = render.render_values(render.user_values([overlay], items, helm=helm), helm=helm)
    flags = ["-f", str(render.CHART_DIR / "values.yaml"), "-f", str(overlay)]
    for item in items:
        flags += ["--set", item]
    out = subprocess.run(
        [
            helm,
            "template",
            render.DEFAULT_RELEASE,
            str(render.CHART_DIR),
            "--namespace",
            render.DEFAULT_NAMESPACE,
            *flags,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert ours == [o for o in yaml.safe_load_all(out) if o]
    sts = next(o for o in ours if o["kind"] == "StatefulSet")
    template = sts["spec"]["template"]
    assert template["metadata"]["labels"]["example.com/team"] == "ml"
    env = {e["name"]: e.get("value") for e in template["spec"]["containers"][0]["env"]}
    assert env["NCCL_SOCKET_IFNAME"] == "^lo,docker"


def test_tfmw_deploy_dry_run_passes_escapes_through():
    proc = run_cli("deploy", "--dry-run", "--env", "dev", "--set", ESCAPED)
    assert proc.returncode == 0, proc.stderr
    assert '"example.com/team": "ml"' in proc.stdout and '"socketIfname": "^lo,docker"' in proc.stdout
