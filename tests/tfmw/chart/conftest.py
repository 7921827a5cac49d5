"""Fixtures of the chart tests: rendered manifests cached per (helm, values) for the session."""

from __future__ import annotations

import copy

import chartkit
import pytest


@pytest.fixture(scope="session", params=sorted(chartkit.HELMS))
def helm(request) -> str:
    """Each test using it runs once with Helm 4 and once with Helm 3."""
    return chartkit.HELMS[request.param]()


_CACHE: dict[tuple, list[dict]] = {}


@pytest.fixture(scope="session")
def render():
    """render(helm, *values_files, sets=()) -> objects, each distinct call rendered once."""

    def _render(executable: str, *values_files, sets=()) -> list[dict]:
        key = (executable, tuple(str(v) for v in values_files), tuple(sets))
        if key not in _CACHE:
            _CACHE[key] = chartkit.template(executable, values_files, sets)
        # Tests may mutate what they get; hand out copies.
        return copy.deepcopy(_CACHE[key])

    return _render
