"""SET=, SET_STRING= and SET_FILE= on the host path (tfmw.chart.sets): what helm takes wrongly or
explains badly is one line naming the key, why, and how to write it; an index into an overlay's
list is said on stderr. No cluster."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from deploykit import REPO, assert_one_line_error, run_cli

from tfmw.chart import sets

DEV_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
DEV = {"workers": {"tolerations": [DEV_TOLERATION], "nodeSelector": {"a": "b"}}}


def test_a_key_is_walked_as_helm_walks_it():
    assert sets.key_parts("workers.tolerations[0].key") == ["workers", "tolerations", 0, "key"]
    assert sets.key_parts("training.files.main\\.py") == ["training", "files", "main.py"]
    assert sets.key_parts("a[1][2]") == ["a", 1, 2]


def test_a_word_after_an_item_is_named_as_a_value_split_on_a_space():
    line = sets.no_equals_refusal(["training.runId=run", "7"], 1, "--set")
    assert line == (
        "bad --set '7': not key=value; SET= splits items on spaces, so 'training.runId=run 7' became "
        "'training.runId=run' and '7': quote a value with spaces, SET=\"training.runId='run 7'\""
    )
    assert "expected key=value" in sets.no_equals_refusal(["oops"], 0, "--set")


@pytest.mark.parametrize("flag", ["--set", "--set-file"])
def test_a_dot_in_a_training_files_name_must_be_escaped(flag):
    line = sets.files_key_refusal("training.files.main.py=main.py", flag)
    assert line.startswith(f"bad {flag} 'training.files.main.py=main.py': training.files takes file names as keys")
    assert line.endswith("escape it: 'training.files.main\\.py=main.py'")
    assert sets.files_key_refusal("training.files.main\\.py=main.py", flag) is None
    assert sets.files_key_refusal("training.files.main=x", flag) is None
    assert sets.files_key_refusal("workers.podLabels.a.b=x", flag) is None


def test_a_binary_file_is_told_from_text(tmp_path):
    assert sets.binary_reason("print('é')\n\tx\r\n".encode()) is None
    assert sets.binary_reason(b"\xff\xfe") == "not UTF-8 text (byte 0)"
    assert sets.binary_reason(b"ab\x00") == "a control character (U+0000) at character 2"
    blob = tmp_path / "blob"
    blob.write_bytes(b"\x00\x01")
    assert sets.binary_file_refusal(f"training.files.blob={blob}").endswith(
        "put a binary file in the image or on the shared storage"
    )
    assert sets.binary_file_refusal(f"workers.podAnnotations.a\\.b={blob}").endswith(
        "; workers.podAnnotations.a.b takes text"
    )
    assert sets.binary_file_refusal(f"training.files.x={tmp_path / 'missing'}") is None  # helm names a missing file
    assert sets.check_items(set_files=[f"training.files.x={tmp_path / 'missing'}"]) is None


def test_a_list_used_as_a_map_is_named():
    line = sets.list_map_mismatch(DEV, ["workers.replicas=2", "workers.tolerations.key=gpu"])
    assert line.startswith("bad --set 'workers.tolerations.key=gpu': workers.tolerations is a list")
    assert "workers.tolerations must be a list" in line and "workers.tolerations[0].key=gpu" in line
    assert "is a map" in sets.list_map_mismatch(DEV, ["workers.nodeSelector[0]=x"])
    assert sets.list_map_mismatch(DEV, ["workers.tolerations[0].key=gpu"]) is None


def test_an_index_into_an_overlays_list_is_warned_about():
    (line,) = sets.list_index_warnings(DEV, ["workers.tolerations[0].key=gpu"], "values/dev.yaml")
    assert line.startswith(
        "WARNING: SET workers.tolerations[0].key=gpu rewrites item 0 of workers.tolerations that values/dev.yaml "
        'gives ({"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}) in place'
    )
    assert "to add an item use index 1 (workers.tolerations[1].key=...)" in line
    assert "edit it in values/dev.yaml" in line
    # appending, or a list the overlay does not give, is what it says
    assert sets.list_index_warnings(DEV, ["workers.tolerations[1].key=gpu", "writableDirs[0]=/x"], "o") == []


def test_a_number_or_boolean_where_text_is_needed_names_set_string():
    given = ["training.command={python,main.py,--epochs,5}"]
    hint = sets.schema_hint("training.command[3]", 5, "string", given)
    assert "SET_STRING='training.command={python,main.py,--epochs,5}' (--set-string)" in hint
    assert '("5")' in hint and "as a number" in hint
    assert "as a boolean" in sets.schema_hint(
        "workers.nodeSelector.gpu", True, "string", ["workers.nodeSelector.gpu=true"]
    )
    assert sets.schema_hint("workers.x", 5, "string", []) == (
        '; the overlay gives a number: quote it there ("5"), or pass it as text with '
        "SET_STRING='workers.x=5' (--set-string)"
    )
    assert "must be a list" in sets.schema_hint("workers.tolerations", {"key": "gpu"}, "array", [])
    assert sets.schema_hint("workers.replicas", "x", "integer", []) == ""


# ---------------------------------------------------------------- as `make template` runs them


def template(tmp_path, *args: str):
    return run_cli("template", "--env", "dev", "--output", str(tmp_path / "m.yaml"), *args)


@pytest.mark.parametrize(
    "item, key, string",
    [
        ("training.command={python,main.py,--epochs,5}", "training.command[3]", "5"),
        ("workers.extraEnv[0].name=A workers.extraEnv[0].value=4", "workers.extraEnv[0].value", "4"),
        ("workers.nodeSelector.gpu=true", "workers.nodeSelector.gpu", "true"),
    ],
)
def test_a_number_where_text_is_needed_is_refused_naming_set_string_and_renders_with_it(tmp_path, item, key, string):
    proc = template(tmp_path, "--set", item)
    line = assert_one_line_error(proc, "template", key, "SET_STRING=", "(--set-string)", f'("{string}")')
    assert proc.returncode == 2, line
    passed = template(tmp_path, "--set-string", item)
    assert passed.returncode == 0, passed.stderr
    # the same item as SET_STRING= reaches the pods as the text it is
    sts = next(o for o in yaml.safe_load_all((tmp_path / "m.yaml").read_text()) if o and o["kind"] == "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    worker = pod["containers"][0]
    seen = {
        "training.command[3]": lambda: [*worker.get("command", []), *worker.get("args", [])],
        "workers.extraEnv[0].value": lambda: [e.get("value") for e in worker["env"] if e["name"] == "A"],
        "workers.nodeSelector.gpu": lambda: [pod["nodeSelector"]["gpu"]],
    }[key]()
    assert string in seen, seen


def test_a_value_with_a_space_says_set_splits_on_spaces(tmp_path):
    proc = template(tmp_path, "--set", "training.runId=run 7")
    assert_one_line_error(proc, "template", "bad --set '7'", "splits items on spaces", "SET=\"training.runId='run 7'\"")


def test_tolerations_as_a_map_name_the_list(tmp_path):
    proc = template(tmp_path, "--set", "workers.tolerations.key=gpu")
    assert_one_line_error(proc, "template", "workers.tolerations is a list", "workers.tolerations[0].key=gpu")
    assert "interface conversion" not in proc.stderr


def test_a_binary_set_file_names_the_key_and_the_file(tmp_path):
    binary = tmp_path / "model.bin"
    binary.write_bytes(bytes(range(256)))
    proc = template(tmp_path, "--set-file", f"training.files.model\\.bin={binary}")
    assert_one_line_error(proc, "template", "training.files.model\\.bin", str(binary), "binary file", "text files")
    assert "values-probe" not in proc.stderr


def test_a_dotted_files_key_says_to_escape_it(tmp_path):
    script = tmp_path / "main.py"
    script.write_text("print(1)\n")
    proc = template(tmp_path, "--set-file", f"training.files.main.py={script}")
    assert_one_line_error(proc, "template", "'training.files.main.py=", f"'training.files.main\\.py={script}'")


def test_an_index_into_the_overlays_list_warns_once_on_stderr(tmp_path):
    proc = template(tmp_path, "--set", "workers.tolerations[0].key=gpu")
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("WARNING: SET workers.tolerations[0].key=gpu rewrites item 0 of workers.tolerations")
    assert "nvidia.com/gpu" in line and "workers.tolerations[1]" in line


def test_make_passes_set_string_and_says_set_splits_on_spaces():
    proc = subprocess.run(
        ["make", "-s", "template", "ENV=dev", "SET=training.runId=run 7"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0 and "SET= splits items on spaces" in proc.stderr, proc.stderr
    dry = subprocess.run(
        ["make", "-s", "-n", "local", "SET_STRING=workers.nodeSelector.gpu=true"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert '--set-string "workers.nodeSelector.gpu=true"' in dry.stdout, dry.stdout
