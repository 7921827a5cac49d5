"""Fixtures of tests/tfmw/deploy: defined in deploykit (tests/support), registered here."""

from deploykit import mini_chart, unreachable_kubeconfig, values_dir

__all__ = ["mini_chart", "unreachable_kubeconfig", "values_dir"]
