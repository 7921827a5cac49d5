"""Fixtures of tests/deploy live in deploykit.py (a unique module name: several conftest.py exist)."""
from deploykit import mini_chart, unreachable_kubeconfig, values_dir  # noqa: F401  (pytest fixtures)
