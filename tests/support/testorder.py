"""The order the suite runs in (tests/conftest.py sorts by it; pure)."""

from __future__ import annotations


def run_order(markers: set[str]) -> tuple[bool, bool, bool]:
    """A test's place, from its markers; a stable sort keeps the order within each place.
    The cluster tests last: the session's shared cluster starts with the first of them and
    stops at the end, so no test that trains on this machine shares the two cores with it. Of
    them, those marked `last` run after the rest (they leave the shared cluster's nodes
    changed), and those marked `own_cluster` after those: they start a cluster of their own, so
    nothing they do to theirs reaches another test. (When a run holds both, tests/support/lanes.py
    moves the fast tests and the `own_cluster` ones to a lane beside the shared cluster's.)"""
    cluster, last, own = ("cluster" in markers, "last" in markers, "own_cluster" in markers)
    return cluster, last or own, own
