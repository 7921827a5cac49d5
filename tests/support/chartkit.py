"""Render, lint and inspect the chart with the real helm binaries (Helm 4 and Helm 3).

Shared by the chart tests (tests/support is on pytest's pythonpath).
Everything here runs helm as a subprocess with values *files*, so overlays merge with
Helm's own rules (maps merge, lists replace), not pyhelm3's list concatenation. Finding helm,
its version and `helm template` itself are scripts/tfmw/chart/helmkit.py's, as for the host tools.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from repo import REPO

from tfmw.chart import helmkit

CHART = REPO / "charts" / "tf-multiworker"
VALUES_DIR = REPO / "values"
OVERLAYS = ("local", "dev", "staging", "prod")
# every optional feature on (chart-testing lints it too)
ALL_ON = REPO / "charts" / "tf-multiworker" / "ci" / "all-on-values.yaml"
RELEASE = "tfmw"
NAMESPACE = "training"
# values/prod.yaml requires image.digest (image.requireDigest): a render of it gets the digest a
# release pipeline would set, unless the test sets image.digest itself (even to "", to see the
# refusal).
STAND_IN_DIGEST = "sha256:" + "0" * 64

helm4 = helmkit.find_helm  # Helm 4: $HELM, else the pinned .tools/bin/helm
helm3 = helmkit.find_helm3  # Helm 3: $HELM3, else the pinned .tools/bin/helm3
HELMS = {"helm4": helm4, "helm3": helm3}


@dataclass(frozen=True)
class HelmResult:
    returncode: int
    stdout: str
    stderr: str


def overlay_path(env: str) -> Path:
    return VALUES_DIR / f"{env}.yaml"


def run_helm(executable: str, args: Sequence[str], env: dict[str, str] | None = None) -> HelmResult:
    """`env` adds to (does not replace) the environment, e.g. private HELM_*_HOME dirs."""
    full_env = {**os.environ, **env} if env else None
    proc = subprocess.run([executable, *args], capture_output=True, text=True, timeout=120, env=full_env)
    return HelmResult(proc.returncode, proc.stdout, proc.stderr)


def template(
    executable: str,
    values_files: Iterable[Path | str] = (),
    sets: Iterable[str] = (),
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    show_only: Sequence[str] = (),
) -> list[dict]:
    """Rendered objects (hooks included); raises AssertionError with helm's stderr on failure."""
    values_files, sets = with_required_digest(values_files, sets)
    result = helmkit.helm_template(executable, CHART, release, namespace, values_files, sets, show_only=show_only)
    assert result.returncode == 0, f"helm template failed: {result.stderr.strip()}"
    return helmkit.parse_manifests(result.stdout)


def template_error(
    executable: str,
    values_files: Iterable[Path | str] = (),
    sets: Iterable[str] = (),
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> str:
    """helm's stderr for values that must be refused; fails the test if helm renders them."""
    values_files, sets = with_required_digest(values_files, sets)
    result = helmkit.helm_template(executable, CHART, release, namespace, values_files, sets)
    assert result.returncode != 0, f"helm rendered values that must be refused: {list(sets)}"
    return result.stderr


def with_required_digest(values_files: Iterable[Path | str], sets: Iterable[str]) -> tuple[list, list[str]]:
    """(values_files, sets), with STAND_IN_DIGEST set when values/prod.yaml is among the files
    and no set names image.digest."""
    values_files, sets = list(values_files), list(sets)
    prod = overlay_path("prod").resolve()
    if any(Path(f).resolve() == prod for f in values_files) and not any(s.startswith("image.digest=") for s in sets):
        sets.append(f"image.digest={STAND_IN_DIGEST}")
    return values_files, sets


def find(objects: Iterable[dict], kind: str, name: str | None = None) -> list[dict]:
    return [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objects: Iterable[dict], kind: str, name: str | None = None) -> dict:
    found = find(objects, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def pod_templates(objects: Iterable[dict]) -> list[tuple[str, dict, dict]]:
    """(`Kind/name`, pod spec, pod annotations) of every pod the objects would create."""
    out = []
    for obj in objects:
        kind, name = obj["kind"], f"{obj['kind']}/{obj['metadata']['name']}"
        if kind == "Pod":
            out.append((name, obj["spec"], obj["metadata"].get("annotations") or {}))
        elif kind in ("StatefulSet", "Deployment", "DaemonSet", "ReplicaSet", "Job"):
            template = obj["spec"]["template"]
            out.append((name, template["spec"], template["metadata"].get("annotations") or {}))
    return out


def pod_labels(obj: dict) -> dict:
    """Labels of the pods an object creates (the object's own for a Pod)."""
    if obj["kind"] == "Pod":
        return obj["metadata"].get("labels") or {}
    return obj["spec"]["template"]["metadata"].get("labels") or {}


def env_of(container: dict) -> dict[str, dict]:
    """Container env as name -> EnvVar (the whole entry, so valueFrom stays visible)."""
    return {item["name"]: item for item in container.get("env", [])}


def notes(*sets: str) -> str:
    """NOTES as `helm install` prints them for these --set items (Helm 4 renders them offline)."""
    args = ["install", RELEASE, str(CHART), "--dry-run=client", "--namespace", NAMESPACE]
    for item in sets:
        args += ["--set", item]
    result = run_helm(helm4(), args)
    assert result.returncode == 0, result.stderr
    return result.stdout.split("NOTES:", 1)[1]
