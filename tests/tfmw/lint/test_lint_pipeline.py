"""`make lint` (scripts/tfmw/lint/pipeline.py): it passes on this repository and fails, naming the check,
on each kind of breakage. Breakage is made in a temporary copy; the real chart is never touched.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from repo import REPO as REPO_ROOT

from tfmw.lint.pipeline import ALL_ON_OVERLAY, CHART_RELATIVE, STAND_IN_DIGEST, discover_overlays, yaml_files_to_lint


def run_lint(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    import os

    environment = dict(os.environ, **env)
    return subprocess.run(
        [sys.executable, "-m", "tfmw.lint", "--root", str(root), *args],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )


def status_lines(result: subprocess.CompletedProcess, status: str) -> list[str]:
    return [line for line in result.stdout.splitlines() if line.startswith(status + " ")]


MINIMAL_CHART = {
    "Chart.yaml": (
        "apiVersion: v2\nname: tf-multiworker\ndescription: a minimal chart\nversion: 0.1.0\n"
        "icon: https://example.com/icon.png\nmaintainers:\n  - name: someone\n"
    ),
    "values.yaml": "workers:\n  replicas: 2\n",
    "values.schema.json": textwrap.dedent("""\
        {"type": "object", "additionalProperties": false,
         "properties": {"workers": {"type": "object", "additionalProperties": false,
           "properties": {"replicas": {"type": "integer", "minimum": 1}}}}}
        """),
    "templates/configmap.yaml": textwrap.dedent("""\
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: {{ .Release.Name }}
        data:
          replicas: {{ .Values.workers.replicas | quote }}
        """),
}


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """A small repository that passes every check: a minimal chart (so these tests do not
    depend on the real chart's state; the real one is linted by the test just below),
    one overlay, this repository's Dockerfile and lint configs. Tests then break one thing."""
    root = tmp_path / "repo"
    for relative, text in MINIMAL_CHART.items():
        path = root / CHART_RELATIVE / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "values").mkdir()
    (root / "values" / "dev.yaml").write_text("workers:\n  replicas: 3\n")
    for name in ("Dockerfile", ".hadolint.yaml", ".yamllint", "ct.yaml"):
        shutil.copy(REPO_ROOT / name, root / name)
    return root


def test_the_minimal_repository_passes(repo_copy):
    result = run_lint(repo_copy, "--skip", "checkov")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        len(status_lines(result, "PASS")) == 2 * 2 + 2 + 2 + 2 + 1
    )  # helm4/helm3 x 2 overlays, validate x 2, hadolint, yamllint, ruff check and format, ct lint


def test_a_chart_yaml_chart_testing_refuses_fails_ct_lint(repo_copy):
    chart = repo_copy / CHART_RELATIVE / "Chart.yaml"
    chart.write_text(chart.read_text().replace("maintainers:\n  - name: someone\n", "maintainers:\n  - email: x\n"))
    result = run_lint(repo_copy, "--only", "ct-lint")
    assert result.returncode == 1, result.stdout
    assert status_lines(result, "FAIL")[0].startswith(
        "FAIL ct lint (chart-testing, ct.yaml): chart-testing's findings"
    ), result.stdout


def test_lint_passes_on_this_repository_without_checkov(tmp_path):
    result = run_lint(REPO_ROOT, "--skip", "checkov", "--out", str(tmp_path / "rendered"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert status_lines(result, "FAIL") == []
    names = result.stdout
    for overlay in ["chart defaults"] + [f"values/{p.name}" for p in sorted((REPO_ROOT / "values").glob("*.yaml"))]:
        assert "PASS helm-lint v4." in names and "PASS helm-lint v3." in names
        assert f"PASS validate {overlay} (k8s 1.30, 1.35, strict)" in names
    assert "PASS hadolint Dockerfile" in names and "PASS yamllint" in names
    assert "PASS validate charts/tf-multiworker/ci/all-on-values.yaml" in names  # the everything-on file is linted too
    assert "PASS ruff check" in names and "PASS ruff format" in names
    assert "PASS ct lint (chart-testing, ct.yaml)" in names
    assert result.stdout.strip().splitlines()[-1].startswith("lint OK: ")
    assert sorted(p.name for p in (tmp_path / "rendered").iterdir())[:2] == [
        "chart_defaults.k8s-1.30.yaml",
        "chart_defaults.k8s-1.35.yaml",
    ]


def test_overlay_breaking_the_values_schema_fails_helm_lint_and_render(repo_copy):
    (repo_copy / "values" / "broken.yaml").write_text("workers:\n  replicas: many\n")
    result = run_lint(repo_copy, "--only", "helm-lint", "--only", "validate")
    assert result.returncode == 1
    failed = status_lines(result, "FAIL")
    assert any(line.startswith("FAIL helm-lint v4.") and "values/broken.yaml" in line for line in failed), result.stdout
    assert any(line.startswith("FAIL helm-lint v3.") and "values/broken.yaml" in line for line in failed), result.stdout
    assert any(line.startswith("FAIL validate values/broken.yaml") for line in failed), result.stdout
    assert "replicas" in result.stdout  # helm's schema error, shown below the FAIL line
    # Only the broken overlay fails; the others still pass.
    assert all("broken.yaml" in line for line in failed), failed
    assert "PASS validate values/dev.yaml" in result.stdout
    assert "lint FAILED: " in result.stdout and "values/broken.yaml" in result.stdout.splitlines()[-1]


def test_unknown_field_in_a_rendered_object_fails_strict_validation(repo_copy):
    (repo_copy / CHART_RELATIVE / "templates" / "zz-lint-test.yaml").write_text(
        textwrap.dedent("""\
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: lint-test
        data:
          a: "1"
        spec: {}
        """)
    )
    result = run_lint(repo_copy, "--only", "validate")
    assert result.returncode == 1
    assert "FAIL validate chart defaults" in result.stdout
    assert (
        "k8s 1.30: ConfigMap/lint-test: (top level): Additional properties are not allowed ('spec' was unexpected)"
        in result.stdout
    )
    assert "k8s 1.35: ConfigMap/lint-test" in result.stdout


def test_api_removed_from_the_target_kubernetes_fails(repo_copy):
    (repo_copy / CHART_RELATIVE / "templates" / "zz-lint-test.yaml").write_text(
        textwrap.dedent("""\
        apiVersion: policy/v1beta1
        kind: PodDisruptionBudget
        metadata:
          name: lint-test
        spec:
          minAvailable: 1
        """)
    )
    result = run_lint(repo_copy, "--only", "validate")
    assert result.returncode == 1
    assert "policy/v1beta1 PodDisruptionBudget is not served by Kubernetes 1.30" in result.stdout


def test_custom_resources_pass_but_are_named_as_not_schema_checked(repo_copy):
    (repo_copy / CHART_RELATIVE / "templates" / "zz-lint-test.yaml").write_text(
        textwrap.dedent("""\
        apiVersion: scheduling.volcano.sh/v1beta1
        kind: PodGroup
        metadata:
          name: lint-test
        spec:
          minMember: 2
        """)
    )
    result = run_lint(repo_copy, "--only", "validate")
    assert result.returncode == 0, result.stdout
    assert "custom resources not schema-checked: PodGroup/lint-test (scheduling.volcano.sh/v1beta1)" in result.stdout


def test_dockerfile_with_a_hadolint_violation_fails(repo_copy):
    with (repo_copy / "Dockerfile").open("a") as dockerfile:
        dockerfile.write("USER root\nRUN apt-get install curl\n")
    result = run_lint(repo_copy, "--only", "hadolint")
    assert result.returncode == 1
    assert status_lines(result, "FAIL")[0].startswith("FAIL hadolint Dockerfile: hadolint findings")
    assert "DL3008" in result.stdout  # unpinned apt package
    assert "DL3002" in result.stdout  # last USER is root


def test_yaml_error_in_an_overlay_fails_yamllint_naming_the_file(repo_copy):
    (repo_copy / "values" / "dup.yaml").write_text("workers:\n  replicas: 2\n  replicas: 3\n")
    result = run_lint(repo_copy, "--only", "yamllint")
    assert result.returncode == 1
    assert status_lines(result, "FAIL")[0].startswith("FAIL yamllint")
    assert "values/dup.yaml:3:" in result.stdout and "key-duplicates" in result.stdout


def test_missing_chart_is_a_one_line_usage_error(tmp_path):
    result = run_lint(tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr
    assert "no chart at" in result.stderr and "--root" in result.stderr


def test_missing_helm_is_a_one_line_usage_error(repo_copy, tmp_path):
    result = run_lint(repo_copy, "--only", "helm-lint", HELM=str(tmp_path / "no-helm"))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr
    assert "no-helm" in result.stderr and "make setup" in result.stderr


@pytest.mark.slow
def test_checkov_failure_fails_lint_naming_the_check(repo_copy):
    (repo_copy / CHART_RELATIVE / "templates" / "zz-lint-test.yaml").write_text(
        textwrap.dedent("""\
        apiVersion: v1
        kind: Pod
        metadata:
          name: lint-test
        spec:
          containers:
            - name: c
              image: busybox
              securityContext:
                privileged: true
        """)
    )
    result = run_lint(repo_copy, "--only", "checkov")
    assert result.returncode == 1
    assert status_lines(result, "FAIL")[0].startswith("FAIL checkov (")
    assert "CKV_K8S_16 Pod." in result.stdout  # "Container should not be privileged"


def test_overlays_include_chart_defaults_and_the_all_on_overlay(tmp_path):
    (tmp_path / "values").mkdir()
    (tmp_path / "values" / "b.yaml").write_text("{}\n")
    (tmp_path / "values" / "a.yaml").write_text("{}\n")
    (tmp_path / ALL_ON_OVERLAY).parent.mkdir(parents=True)
    (tmp_path / ALL_ON_OVERLAY).write_text("{}\n")
    labels = [o.label for o in discover_overlays(tmp_path)]
    assert labels == ["chart defaults", "values/a.yaml", "values/b.yaml", "charts/tf-multiworker/ci/all-on-values.yaml"]


def test_yamllint_gets_plain_yaml_but_never_helm_templates(repo_copy):
    workflows = repo_copy / ".github" / "workflows"
    workflows.mkdir(parents=True)
    (workflows / "ci.yml").write_text("on: push\n")
    files = [str(p.relative_to(repo_copy)) for p in yaml_files_to_lint(repo_copy)]
    assert f"{CHART_RELATIVE}/values.yaml" in files and f"{CHART_RELATIVE}/Chart.yaml" in files
    assert ".github/workflows/ci.yml" in files and "values/dev.yaml" in files
    assert not any("/templates/" in f for f in files)


def test_python_findings_fail_ruff_naming_the_file(repo_copy):
    (repo_copy / "tool.py").write_text("import os\n")  # imported, never used
    (repo_copy / "ugly.py").write_text("x = {'a':1}\n")  # not as the formatter writes it
    result = run_lint(repo_copy, "--only", "ruff")
    assert result.returncode == 1, result.stdout
    failed = status_lines(result, "FAIL")
    assert [line.split(":")[0] for line in failed] == ["FAIL ruff check", "FAIL ruff format"], failed
    assert "tool.py:1:8: F401" in result.stdout and "ugly.py" in result.stdout


def test_a_noqa_that_silences_nothing_fails_ruff(repo_copy):
    (repo_copy / "pyproject.toml").write_text((REPO_ROOT / "pyproject.toml").read_text())
    (repo_copy / "tool.py").write_text("x = 1  # noqa: E501\n")
    result = run_lint(repo_copy, "--only", "ruff")
    assert result.returncode == 1 and "RUF100" in result.stdout, result.stdout


def test_a_digest_stands_in_only_where_the_release_pipeline_must_set_one(tmp_path):
    """An overlay that requires a digest (values/prod.yaml) cannot render without one, and the
    chart defaults are no deployment: both are linted with the stand-in. An overlay that names
    no digest and does not say it runs a tag on purpose is linted as it is, for checkov to flag."""
    assert [o.sets for o in discover_overlays(tmp_path)] == [()]  # a chart without image.digest: nothing to stand in
    (tmp_path / CHART_RELATIVE).mkdir(parents=True)
    (tmp_path / CHART_RELATIVE / "values.yaml").write_text('image:\n  repository: r\n  digest: ""\n')
    (tmp_path / "values").mkdir()
    (tmp_path / "values" / "prod.yaml").write_text("image:\n  requireDigest: true\n")
    (tmp_path / "values" / "pinned.yaml").write_text(
        "image:\n  requireDigest: true\n  digest: sha256:" + "1" * 64 + "\n"
    )
    (tmp_path / "values" / "tag.yaml").write_text("workers:\n  replicas: 2\n")
    sets = {o.label: o.sets for o in discover_overlays(tmp_path)}
    assert sets == {
        "chart defaults": (STAND_IN_DIGEST,),
        "values/pinned.yaml": (),
        "values/prod.yaml": (STAND_IN_DIGEST,),
        "values/tag.yaml": (),
    }
    prod = next(o for o in discover_overlays(tmp_path) if o.label == "values/prod.yaml")
    assert prod.helm_args()[-2:] == ["--set", STAND_IN_DIGEST]
