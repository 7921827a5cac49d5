"""tfmw.chart.render: values layered exactly as helm layers them, schema refusals, offline render."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml
from chartkit import STAND_IN_DIGEST
from deploykit import HELM3, HELM4, REPO

from tfmw.chart import render
from tfmw.chart.helmkit import ToolError


def helm_template(helm: str, chart, *flags: str, release="tf-multiworker", namespace="default") -> list[dict]:
    """Reference: what plain `helm template` prints for the same files and --set flags."""
    out = subprocess.run(
        [helm, "template", release, str(chart), "--namespace", namespace, *flags],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [o for o in yaml.safe_load_all(out) if o]


def seen_values(objects: list[dict]) -> dict:
    """The mini chart's ConfigMap carries .Values as JSON."""
    cm = next(o for o in objects if o["kind"] == "ConfigMap")
    return json.loads(cm["data"]["values.json"])


@pytest.mark.parametrize("helm", [HELM4, HELM3], ids=["helm4", "helm3"])
def test_layering_maps_merge_lists_replace_null_deletes(mini_chart, values_dir, helm):
    values = render.layer_values(mini_chart, [values_dir / "dev.yaml"], ["workers.port=3333"], helm=helm)
    assert values["workers"] == {
        "replicas": 3,  # overlay wins
        "port": 3333,  # --set wins, typed as int
        "tolerations": [{"key": "gpu", "operator": "Exists"}],  # list replaced, not appended
    }
    assert values["training"]["args"] == ["--epochs", "1"]
    assert values["extra"] == {"keep": "kept"}  # null deleted the default key
    assert values["labels"] == {"team": "ml"}  # untouched map kept


@pytest.mark.parametrize("helm", [HELM4, HELM3], ids=["helm4", "helm3"])
def test_render_equals_helm_template_with_files(mini_chart, values_dir, helm, tmp_path):
    """pyhelm3 + one merged dict == `helm template -f values.yaml -f overlay -f overlay --set ...`."""
    second = tmp_path / "second.yaml"
    second.write_text("workers:\n  tolerations: []\nextra: null\nlabels: {tier: a}\n")
    sets = ["training.args={--epochs,7}", "labels.note=a\\,b", "workers.replicas=5", "labels.team=null"]
    supplied = render.user_values([values_dir / "dev.yaml", second], sets, helm=helm)
    ours = render.render_values(supplied, mini_chart, "tf-multiworker", "ns1", helm=helm)
    flags = ["-f", str(mini_chart / "values.yaml"), "-f", str(values_dir / "dev.yaml"), "-f", str(second)]
    for item in sets:
        flags += ["--set", item]
    reference = helm_template(helm, mini_chart, *flags, namespace="ns1")
    assert ours == reference
    assert seen_values(ours)["labels"] == {"tier": "a", "note": "a,b"}
    assert "extra" not in seen_values(ours)
    assert seen_values(ours)["workers"]["tolerations"] == []


@pytest.mark.parametrize("helm", [HELM4, HELM3], ids=["helm4", "helm3"])
def test_layer_values_equals_what_the_templates_see(mini_chart, values_dir, helm, tmp_path):
    second = tmp_path / "second.yaml"
    second.write_text("workers:\n  tolerations: null\nlabels: {tier: a}\n")
    sets = ["extra.keep=null", "training.args[1]=9"]
    flags = ["-f", str(values_dir / "dev.yaml"), "-f", str(second), "--set", sets[0], "--set", sets[1]]
    assert render.layer_values(mini_chart, [values_dir / "dev.yaml", second], sets, helm=helm) == seen_values(
        helm_template(helm, mini_chart, *flags)
    )


def test_set_items_split_on_spaces_keep_quotes():
    assert render.split_sets(["a=1 b.c={x,y}", "d='two words'"]) == ["a=1", "b.c={x,y}", "d=two words"]
    assert render.split_sets(None) == []


def test_set_without_equals_is_refused():
    with pytest.raises(ToolError, match=r"bad --set 'workers\.replicas': expected key=value"):
        render.split_sets("workers.replicas")


def test_a_word_after_an_item_is_a_value_split_on_its_space():
    with pytest.raises(ToolError) as refused:
        render.split_sets("a=1 oops")
    assert str(refused.value) == (
        "bad --set 'oops': not key=value; SET= splits items on spaces, so 'a=1 oops' became 'a=1' and 'oops': "
        "quote a value with spaces, SET=\"a='1 oops'\""
    )


def test_set_syntax_helm_rejects_is_refused_with_helms_reason(mini_chart, values_dir):
    with pytest.raises(ToolError, match=r"bad --set .*error parsing index"):
        render.prepare("dev", "workers.tolerations[x]=1", chart_dir=mini_chart, values_dir=values_dir)


def test_unknown_env_lists_the_known_ones(values_dir):
    with pytest.raises(ToolError, match=r"unknown ENV 'qa': known environments are broken, dev, prod, typo"):
        render.overlay_path("qa", values_dir)


def test_known_envs_of_the_repo_are_the_overlays():
    assert {"local", "dev", "staging", "prod"} <= set(render.known_envs())


@pytest.mark.parametrize(
    "env,prefix", [("broken", "invalid value for workers.replicas"), ("typo", "unknown key workers.replicaz")]
)
def test_schema_violation_names_the_key(mini_chart, values_dir, env, prefix):
    with pytest.raises(ToolError) as err:
        render.prepare(env, chart_dir=mini_chart, values_dir=values_dir)
    message = str(err.value)
    assert message.startswith(f"{prefix}:") and f"{env}.yaml" in message
    assert "\n" not in message


def test_schema_violation_from_set_names_key_and_set(mini_chart, values_dir):
    with pytest.raises(
        ToolError,
        match=r"invalid value for workers\.replicas: four is not of type integer.*--set workers\.replicas=four",
    ):
        render.prepare("dev", "workers.replicas=four", chart_dir=mini_chart, values_dir=values_dir)


def test_invalid_manifest_is_refused_naming_object_and_field():
    bad = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "svc"},
        "spec": {"ports": [{"port": "grpc-not-a-number"}]},
    }
    with pytest.raises(
        ToolError,
        match=r"rendered Service/svc is invalid for Kubernetes 1\.35 at "
        r"spec\.ports\[0\]\.port",
    ):
        render.validate_manifests([bad], "1.35")


def test_custom_resources_are_reported_not_refused():
    pod_group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "pg"},
        "spec": {"minMember": 2},
    }
    assert render.validate_manifests([pod_group], "1.35") == ["scheduling.x-k8s.io/v1alpha1 PodGroup"]


def test_unknown_kube_version_is_refused():
    with pytest.raises(ToolError, match=r"--kube-version 9\.99 is not known"):
        render.validate_manifests([{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}], "9.99")


@pytest.mark.parametrize("env", ["local", "dev", "staging", "prod"])
def test_real_chart_renders_offline_like_helm_template(env):
    """The real chart and overlay: our pipeline == `helm template -f values/<env>.yaml --set ...`."""
    sets = ["training.runId=run-42"]
    if env == "prod":  # prod requires a digest (image.requireDigest)
        sets.append(f"image.digest={STAND_IN_DIGEST}")
    ours = render.render(env, sets, release="rel", namespace="ml")
    reference = helm_template(
        HELM4,
        render.CHART_DIR,
        "-f",
        str(render.CHART_DIR / "values.yaml"),
        "-f",
        str(render.VALUES_DIR / f"{env}.yaml"),
        *(arg for item in sets for arg in ("--set", item)),
        release="rel",
        namespace="ml",
    )
    assert ours == reference
    kinds = {o["kind"] for o in ours}
    assert "StatefulSet" in kinds and "Service" in kinds


def test_render_to_file_writes_build_env_manifests(tmp_path):
    path = render.render_to_file("prod", [f"image.digest={STAND_IN_DIGEST}"], path=tmp_path / "prod" / "manifests.yaml")
    objects = [o for o in yaml.safe_load_all(path.read_text()) if o]
    assert any(o["kind"] == "StatefulSet" for o in objects)
    assert render.manifests_path("prod") == REPO / "build" / "prod" / "manifests.yaml"


def test_schema_violation_in_chart_defaults_blames_the_chart(mini_chart, values_dir):
    defaults = mini_chart / "values.yaml"
    defaults.write_text(defaults.read_text().replace("  port: 2222", "  port: not-a-port"))
    with pytest.raises(ToolError, match=r"invalid value for workers\.port: .*in the chart's own .*values\.yaml"):
        render.prepare("dev", chart_dir=mini_chart, values_dir=values_dir)


def test_set_file_puts_the_files_text_in_the_values_helm_gets(tmp_path):
    script = tmp_path / "main.py"
    script.write_text("import mnist_setup\nprint('a, b = c')\n")  # commas and '=' stay text
    rendered = render.prepare(
        "local",
        ["training.command={python,/opt/tf-multiworker/files/main.py}"],
        release="f",
        set_files=[f"training.files.main\\.py={script}"],
    )
    assert rendered.user_values["training"]["files"] == {"main.py": script.read_text()}
    (files,) = [
        o for o in rendered.objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "f-tf-multiworker-files"
    ]
    assert files["data"]["main.py"] == script.read_text()


def test_a_set_file_that_cannot_be_read_is_one_line(tmp_path):
    with pytest.raises(ToolError) as err:
        render.prepare("local", set_files=[f"training.files.main\\.py={tmp_path / 'missing.py'}"])
    message = str(err.value)
    assert message.startswith("bad --set-file") and "missing.py" in message and "\n" not in message


def test_an_overlay_with_a_key_given_twice_is_refused_naming_both_lines(tmp_path):
    """Helm keeps the last of two equal keys silently; make template / deploy / local refuse."""
    (tmp_path / "dup.yaml").write_text("workers:\n  replicas: 2\n  gpus: 0\n  replicas: 3\n")
    with pytest.raises(ToolError, match=r"dup\.yaml line 4: duplicate key 'replicas' \(first on line 2\)"):
        render.prepare("dup", values_dir=tmp_path)


@pytest.mark.parametrize(
    "sets,says",
    [
        ("training.config.stepz=100", "training.config.stepz: unknown key (allowed here: allReduceDtype,"),
        ("training.config.steps=abc", "training.config.steps: 'abc' is not of type 'integer'"),
        (
            "training.config.checkpoint.everySteps=0",
            "training.config.checkpoint.everySteps and checkpoint.everySeconds are both 0",
        ),
        ("training.config.data.synthetic.inputShape={100000,100000}", "more than the limit of 16777216"),
    ],
)
def test_the_training_config_is_checked_by_the_trainers_own_validator_before_anything_runs(sets, says):
    with pytest.raises(ToolError) as refused:
        render.prepare("local", sets)
    assert says in str(refused.value) and "refused by the built-in trainer's validator" in str(refused.value)


def test_a_user_command_reads_its_own_training_config():
    rendered = render.prepare("local", ["training.command={python,main.py}", "training.config.myKey=1"])
    assert rendered.find("ConfigMap")
