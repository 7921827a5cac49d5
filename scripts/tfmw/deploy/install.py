"""The one way the host tools install the chart outside `make deploy` (the fault harness, the
benches): the values are checked as `make deploy` checks them (the schema, the built-in
trainer's config, every object strict against the Kubernetes schema, Pod Security restricted:
tfmw.chart.render.prepare), then helm gets exactly those inputs. A refusal is a ToolError whose
one line names the value and the fix."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tfmw.chart import render

VERBS = ("install", "upgrade")


def checked_args(
    release: str,
    namespace: str,
    sets: Sequence[str] = (),
    values_files: Sequence[Path] = (),
    *,
    env: str = "local",
    verb: str = "install",
    helm: str | None = None,
) -> list[str]:
    """`helm install` (or `upgrade`) arguments of `env`'s overlay, `values_files` and `sets`,
    once those values are valid for the chart and render valid objects."""
    if verb not in VERBS:
        raise ValueError(f"verb {verb!r} is not one of {VERBS}")
    rendered = render.prepare(
        env, list(sets), release=release, namespace=namespace, helm=helm, values_files=values_files
    )
    args = [verb, release, str(render.CHART_DIR), "-n", namespace, "-f", str(rendered.overlay)]
    for path in values_files:
        args += ["-f", str(path)]
    for item in rendered.sets:
        args += ["--set", item]
    return args
