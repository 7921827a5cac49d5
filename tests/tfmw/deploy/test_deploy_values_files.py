"""Values the team's way: VALUES= files (-f after the overlay), SET_JSON= (--set-json) beside
SET=/SET_STRING=/SET_FILE=, layered in helm's own order with the real helm, and each refusal of
them in one line. `tfmw check`: every check `tfmw template` runs, for a GitOps pipeline."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest
import yaml
from deploykit import HELM3, HELM4, REPO, assert_one_line_error, run_cli

from tfmw import cli
from tfmw.chart import render, sets
from tfmw.chart.helmkit import ToolError


def seen_values(helm: str, chart, *flags: str) -> dict:
    """What plain `helm template` shows the mini chart's templates (its ConfigMap carries .Values)."""
    out = subprocess.run([helm, "template", "r", str(chart), *flags], capture_output=True, text=True, check=True).stdout
    cm = next(o for o in yaml.safe_load_all(out) if o and o["kind"] == "ConfigMap")
    return json.loads(cm["data"]["values.json"])


# ---------------------------------------------------------------- helm's precedence


@pytest.mark.parametrize("helm", [HELM4, HELM3], ids=["helm4", "helm3"])
def test_each_layer_wins_over_the_one_before_in_helms_order(mini_chart, tmp_path, helm):
    """chart values.yaml < overlay < VALUES files in order < --set-json < --set < --set-string <
    --set-file: one key per layer, each set by every layer from its own on, so the key shows
    which layer won; helm's own `helm template`, its flags given in the reverse order, agrees."""
    keys = "abcdefg"
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(yaml.safe_dump({"extra": {k: "overlay" for k in keys}}))
    one, two = tmp_path / "one.yaml", tmp_path / "two.yaml"
    one.write_text(yaml.safe_dump({"extra": {k: "one" for k in keys[1:]}}))
    two.write_text(yaml.safe_dump({"extra": {k: "two" for k in keys[2:]}, "workers": {"tolerations": []}}))
    text = tmp_path / "g.txt"
    text.write_text("file")
    jsons = [",".join(f'extra.{k}="json"' for k in keys[3:])]
    typed = [" ".join(f"extra.{k}=set" for k in keys[4:])]
    strings = [" ".join(f"extra.{k}=string" for k in keys[5:])]
    files = [f"extra.g={text}"]
    effective = render.layer_values(
        mini_chart,
        [overlay, *render.split_values_files(f"{one},{two}")],
        render.split_sets(typed),
        helm,
        files,
        render.split_sets(strings, flag="--set-string"),
        jsons,
    )
    assert effective["extra"] == {
        "keep": "kept",  # the chart's values.yaml
        "drop": "dropped",
        "a": "overlay",
        "b": "one",
        "c": "two",  # the later VALUES file
        "d": "json",
        "e": "set",
        "f": "string",
        "g": "file",
    }
    assert effective["workers"]["tolerations"] == []  # a VALUES file's list replaces the chart's
    reverse = [
        "--set-file",
        files[0],
        "--set-string",
        strings[0].replace(" ", ","),
        "--set",
        typed[0].replace(" ", ","),
    ]
    reverse += ["--set-json", jsons[0], "-f", str(overlay), "-f", str(one), "-f", str(two)]
    assert seen_values(helm, mini_chart, *reverse) == effective


def test_values_files_split_on_commas_in_order():
    assert render.split_values_files(["a.yaml,b.yaml", " c.yaml "]) == [
        render.Path("a.yaml"),
        render.Path("b.yaml"),
        render.Path("c.yaml"),
    ]
    assert render.split_values_files(None) == [] and render.split_values_files("") == []


# ---------------------------------------------------------------- a VALUES= file refused


@pytest.mark.parametrize(
    "name, text, says",
    [
        ("missing.yaml", None, "does not exist (relative paths are from"),
        ("folder", "", "is a directory"),
        ("list.yaml", "- workers\n- training\n", "holds a list, not a mapping of chart values"),
        ("scalar.yaml", "replicas=4\n", "holds a single str value, not a mapping"),
        ("broken.yaml", "workers: [\n", "line 2 is not valid YAML"),
        ("latin1.yaml", b"team: caf\xe9\n", "cannot be read (not UTF-8 text)"),
    ],
)
def test_a_values_file_that_is_not_a_readable_mapping_is_refused_naming_it(tmp_path, name, text, says):
    path = tmp_path / name
    if name == "folder":
        path.mkdir()
    elif isinstance(text, bytes):
        path.write_bytes(text)
    elif text is not None:
        path.write_text(text)
    with pytest.raises(ToolError) as refused:
        render.check_values_file(path)
    line = str(refused.value)
    assert line.startswith(f"values file {path}") and says in line, line
    assert "VALUES=path[,path] (-f)" in line and refused.value.exit_code == 2
    (tmp_path / "empty.yaml").write_text("")
    render.check_values_file(tmp_path / "empty.yaml")  # no values, as in helm


def test_a_values_file_giving_a_key_twice_is_refused_naming_both_lines(tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text("workers:\n  replicas: 2\n  replicas: 4\n")
    with pytest.raises(ToolError, match=r"team.yaml line 3: duplicate key 'replicas' \(first on line 2\)"):
        render.check_values_file(path)


def test_template_refuses_a_missing_values_file_in_one_line(tmp_path):
    proc = run_cli("template", "--env", "dev", "-f", str(tmp_path / "team.yaml"), "--output", str(tmp_path / "m"))
    assert_one_line_error(proc, "template", f"values file {tmp_path / 'team.yaml'} does not exist", "VALUES=")
    assert proc.returncode == 2 and not (tmp_path / "m").exists()


# ---------------------------------------------------------------- VALUES= and SET_JSON= rendered


def test_template_layers_values_files_and_set_json_over_the_overlay(tmp_path):
    team = tmp_path / "team.yaml"
    team.write_text('workers:\n  replicas: 3\n  nodeSelector: {pool: a}\ntraining:\n  runId: "007"\n')
    late = tmp_path / "late.yaml"
    late.write_text('training:\n  runId: "008"\n')
    out = tmp_path / "m.yaml"
    proc = run_cli(
        "template",
        "--env",
        "dev",
        "-f",
        f"{team},{late}",
        "--set-json",
        'workers.nodeSelector={"pool": "b", "gpu": "a100"}',
        "--output",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    assert f"values: values/dev.yaml + {team} + {late} + --set-json workers.nodeSelector=" in proc.stdout
    sts = next(o for o in yaml.safe_load_all(out.read_text()) if o and o["kind"] == "StatefulSet")
    assert sts["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "b", "gpu": "a100"}
    env = {e["name"]: e.get("value") for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["TFMW_RUN_ID"] == "008"  # the later file wins; its quoted text stays text


def test_a_bad_set_json_is_one_line_naming_the_form():
    with pytest.raises(ToolError) as refused:
        render.prepare("dev", set_jsons=["workers.replicas=["])
    assert str(refused.value).startswith("bad --set-json 'workers.replicas=[': failed parsing --set-json data")
    assert "key=JSON" in str(refused.value)


# ---------------------------------------------------------------- "not of type string": how to write it


def test_a_number_a_values_file_gives_where_text_is_needed_names_the_file_and_both_fixes(tmp_path):
    num = tmp_path / "num.yaml"
    num.write_text("training:\n  command: [python, main.py, --epochs, 5]\n")
    with pytest.raises(ToolError) as refused:
        render.prepare("dev", values_files=[num])
    line = str(refused.value)
    assert "invalid value for training.command[3]: 5 is not of type string" in line, line
    assert f'{num} gives a number: quote it there ("5")' in line
    assert "SET_STRING='training.command[3]=5' (--set-string)" in line
    hint = sets.schema_hint("workers.nodeSelector.gpu", 5, "string", [], set_jsons=['workers.nodeSelector={"gpu":5}'])
    assert hint == '; SET_JSON= gives a number: write it as a JSON string ("5")'


def test_the_later_file_that_gives_a_key_is_the_one_named(tmp_path):
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("workers:\n  nodeSelector: {gpu: 1}\n")
    second.write_text("workers:\n  nodeSelector: {gpu: 2}\n")
    assert sets.giving_file("workers.nodeSelector.gpu", [first, second]) == second
    assert sets.giving_file("workers.nodeSelector.pool", [first, second]) is None
    assert sets.giving_file("training.command[1]", [REPO / "values" / "dev.yaml"]) is None


# ---------------------------------------------------------------- tfmw check


def check(capsys, *args: str) -> tuple[int, list[str], list[str]]:
    code = cli.main(["check", *args])
    out, err = capsys.readouterr()
    return code, out.strip().splitlines(), err.strip().splitlines()


def test_check_passes_with_one_summary_line_and_writes_nothing(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing written here (nor under build/)
    team = tmp_path / "team.yaml"
    team.write_text("workers:\n  replicas: 3\n")
    code, out, err = check(capsys, "--env", "dev", "-f", str(team), "--set", "training.runId=r7")
    assert code == 0 and err == [], err
    (line,) = out
    assert line.startswith(f"check passed: values/dev.yaml + {team} + --set training.runId=r7: values valid for ")
    assert "objects valid for Kubernetes 1.35 and Pod Security restricted" in line
    assert "release tf-multiworker-dev in namespace tfmw-dev" in line
    assert list(tmp_path.iterdir()) == [team]


def test_check_without_env_takes_the_values_files_alone(capsys, tmp_path):
    """A GitOps repository holds its own values: no overlay of this repository is layered."""
    gitops = tmp_path / "values.yaml"
    gitops.write_text("target:\n  release: team-a\n  namespace: ml\nworkers:\n  replicas: 4\n")
    code, out, _ = check(capsys, "-f", str(gitops))
    assert code == 0
    assert out[0].startswith(f"check passed: {gitops}: ") and "release team-a in namespace ml" in out[0]
    assert "values/local.yaml" not in out[0]


def test_check_says_each_values_problem_on_its_own_line(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("workers:\n  replicas: 0\ntraining:\n  config:\n    epochz: 3\n")
    code, out, err = check(capsys, "-f", str(bad))
    assert code == 2 and out == []
    assert all(line.startswith("tfmw check: error: ") for line in err) and len(err) == 3, err
    assert "training.config.epochz: unknown key" in err[0] and "built-in trainer's validator" in err[0]
    assert any("invalid value for workers.replicas: 0 must be at least 1" in line for line in err[1:])
    assert all(f"from {bad}" in line for line in err)


@pytest.mark.parametrize(
    "args, says",
    [
        (["-f", "{tmp}/none.yaml"], "values file {tmp}/none.yaml does not exist"),
        (["-f", "{tmp}/list.yaml"], "values file {tmp}/list.yaml holds a list"),
        (["--env", "dev", "--set", "training.runId=run 7"], "SET= splits items on spaces"),
        (["--env", "dev", "--set-json", "workers.replicas=["], "bad --set-json 'workers.replicas=['"),
        (["--env", "dev", "--set", "metrics.port=2222"], "metrics.port=2222 is workers.port"),  # the chart's own
        (["--env", "dev", "--kube-version", "1.25"], "--kube-version 1.25: Kubernetes 1.25 is outside"),
    ],
)
def test_check_refuses_in_one_line(capsys, tmp_path, args, says):
    (tmp_path / "list.yaml").write_text("- a\n")
    code, out, err = check(capsys, *(a.format(tmp=tmp_path) for a in args))
    assert code == 2 and out == []
    (line,) = err
    assert line.startswith("tfmw check: error: ") and says.format(tmp=tmp_path) in line, line


@pytest.mark.parametrize(
    "given, says",
    [
        ("training:\n  args: 5\n", "rendered StatefulSet/tf-multiworker is invalid for Kubernetes 1.35 at"),
        ("training:\n  args: [x]\n", "rendered pods violate Pod Security Standards restricted: StatefulSet/"),
    ],
)
def test_check_runs_the_strict_manifest_checks(capsys, mini_chart, tmp_path, given, says):
    """Objects Kubernetes would refuse, pods Pod Security restricted would refuse: the real chart
    renders neither (its own validation refuses first), the mini chart (its training.args are the
    container's args, its pod sets no securityContext) does."""
    values = tmp_path / "v.yaml"
    values.write_text(given)
    code, _, err = check(capsys, "--chart", str(mini_chart), "-f", str(values))
    assert code == 2
    (line,) = err
    assert line.startswith("tfmw check: error: ") and says in line, line


def test_make_check_passes_env_values_and_sets():
    proc = subprocess.run(
        ["make", "-s", "-n", "check", "VALUES=a.yaml,b.yaml", 'SET_JSON=a={"x": 1}', "SET_STRING=b=5"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    line = next(ln for ln in proc.stdout.splitlines() if "tfmw check" in ln)
    assert '--values "a.yaml,b.yaml"' in line and "--set-json 'a={\"x\": 1}'" in line, line
    assert '--set-string "b=5"' in line and "--env" not in line, line


def test_make_passes_set_json_holding_an_apostrophe_as_one_argument():
    given = 'training.config={"note": "it\'s the team\'s run", "steps": 5}'
    proc = subprocess.run(
        ["make", "-s", "-n", "check", f"SET_JSON={given}"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    line = next(ln for ln in proc.stdout.splitlines() if "tfmw check" in ln)
    words = shlex.split(line)  # as the shell reads the recipe
    assert words[words.index("--set-json") + 1] == given, line


@pytest.mark.parametrize("verb", ["template", "deploy", "diff", "local"])
def test_every_make_verb_that_renders_passes_values_and_set_json(verb):
    proc = subprocess.run(
        ["make", "-s", "-n", verb, "ENV=dev", "VALUES=team.yaml", 'SET_JSON=a={"x": 1}', "SET_STRING=b=5"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    line = next(ln for ln in proc.stdout.splitlines() if "--env dev" in ln)
    assert '--values "team.yaml"' in line and "--set-json 'a={\"x\": 1}'" in line and '--set-string "b=5"' in line
