"""checkov (offline, its own venv) finds no failed check in anything the chart renders.

Skips live in the templates as `checkov.io/skipN: CKV_K8S_xx=<reason>` annotations; each
must carry a reason and be listed in docs/security.md.
"""

from __future__ import annotations

import json
import re

import chartkit
import pytest
import yaml
from chartkit import ALL_ON, OVERLAYS, overlay_path

from tfmw.lint import checkov_scan

# checkov splits the annotation on "=": a reason containing "=" crashes it.
SKIP = re.compile(r"^(CKV2?_K8S_\d+)=([^=]{20,})$")
SECURITY_DOC = chartkit.REPO / "docs" / "security.md"

SCANNED = {env: ([overlay_path(env)], ()) for env in OVERLAYS}
SCANNED["all-on"] = ([ALL_ON], ())
SCANNED["object-store"] = (
    [overlay_path("prod")],
    (
        "storage.type=objectStore",
        "storage.objectStore.uri=gs://bucket/tfmw",
        "storage.objectStore.existingSecret=gcs-creds",
        "tensorboard.enabled=true",
        "scheduling.gang=coscheduling",
    ),
)

PRIVILEGED_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "bad", "namespace": "training"},
    "spec": {
        "hostNetwork": True,
        "containers": [{"name": "c", "image": "busybox:latest", "securityContext": {"privileged": True}}],
    },
}


@pytest.fixture(scope="module")
def manifests(tmp_path_factory):
    """Every variant rendered with Helm 4 into its own file."""
    out = tmp_path_factory.mktemp("checkov")
    paths = {}
    for name, (files, sets) in SCANNED.items():
        objects = chartkit.template(chartkit.helm4(), files, sets)
        path = out / f"{name}.yaml"
        path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
        paths[name] = path
    return paths


def test_checkov_finds_nothing_in_any_rendered_variant(manifests, tmp_path):
    bad = tmp_path / "privileged.yaml"
    bad.write_text(yaml.safe_dump(PRIVILEGED_POD))
    # An overlay that runs a tag without saying so (dev without image.allowMutableTag): the
    # digest check is skipped only by that explicit choice, never by an empty digest alone.
    unmarked = tmp_path / "unmarked-tag.yaml"
    objects = chartkit.template(chartkit.helm4(), [overlay_path("dev")], ["image.allowMutableTag=false"])
    unmarked.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    # One checkov run for everything (it costs seconds to start): the known-bad pod
    # proves the scan really checks, the chart's files must contribute no failure.
    failed = checkov_scan.scan([*manifests.values(), bad, unmarked])
    chart_failures = [f for f in failed if "privileged.yaml" not in f.file and "unmarked-tag.yaml" not in f.file]
    assert not chart_failures, "\n".join(map(str, chart_failures))
    bad_ids = {f.check_id for f in failed if "privileged.yaml" in f.file}
    assert {"CKV_K8S_16", "CKV_K8S_19"} <= bad_ids  # privileged, hostNetwork
    unmarked_ids = {(f.check_id, f.resource.split(".")[0]) for f in failed if "unmarked-tag.yaml" in f.file}
    assert ("CKV_K8S_43", "StatefulSet") in unmarked_ids and {c for c, _ in unmarked_ids} == {"CKV_K8S_43"}


def test_every_skip_has_a_reason_and_is_documented(manifests):
    documented = SECURITY_DOC.read_text()
    seen = set()
    for path in manifests.values():
        for obj in yaml.safe_load_all(path.read_text()):
            for key, value in (obj["metadata"].get("annotations") or {}).items():
                if not key.startswith("checkov.io/skip"):
                    continue
                match = SKIP.match(value)
                assert match, f"{obj['kind']}: {key}={value!r} lacks 'CKV_K8S_xx=<reason>'"
                seen.add(match[1])
    assert seen, "expected the documented skips to appear"
    undocumented = sorted(check for check in seen if check not in documented)
    assert not undocumented, f"skips missing from docs/security.md: {undocumented}"


def test_scan_refuses_a_missing_file(tmp_path):
    with pytest.raises(checkov_scan.CheckovError, match="no such manifest"):
        checkov_scan.scan([tmp_path / "absent.yaml"])


def test_cli_exit_codes(tmp_path, capsys):
    assert checkov_scan.main([]) == 2
    assert "give at least one manifest" in capsys.readouterr().err
    bad = tmp_path / "privileged.yaml"
    bad.write_text(yaml.safe_dump(PRIVILEGED_POD))
    assert checkov_scan.main([str(bad)]) == 1
    assert "CKV_K8S_16" in capsys.readouterr().out


def test_parse_report_reads_single_and_multi_framework_output():
    report = {
        "check_type": "kubernetes",
        "results": {
            "failed_checks": [{"check_id": "CKV_K8S_1", "check_name": "n", "resource": "Pod.x", "file_path": "/f"}]
        },
    }
    assert [f.check_id for f in checkov_scan.parse_report(json.dumps(report))] == ["CKV_K8S_1"]
    assert len(checkov_scan.parse_report(json.dumps([report, report]))) == 2
    assert checkov_scan.parse_report(json.dumps({"passed": 0, "failed": 0})) == []


def test_ensure_checkov_is_idempotent(tmp_path, monkeypatch):
    """An installed, stamped venv is used as is: no pip run (which would fail here)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "checkov").write_text("")
    (venv / ".installed-requirement").write_text("checkov==1.0\n")
    monkeypatch.setattr(checkov_scan, "_run", lambda *a: pytest.fail("must not install"))
    assert checkov_scan.ensure_checkov(venv, "checkov==1.0") == venv / "bin" / "checkov"
    # A changed pin reinstalls.
    calls = []
    monkeypatch.setattr(checkov_scan, "_run", lambda cmd, what: calls.append(cmd))
    checkov_scan.ensure_checkov(venv, "checkov==2.0")
    assert any("checkov==2.0" in cmd for cmd in calls)
    assert (venv / ".installed-requirement").read_text().strip() == "checkov==2.0"
