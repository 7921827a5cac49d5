"""The order the suite runs in (tests/conftest.py sorts by it; pure)."""

from __future__ import annotations


def run_order(markers: set[str]) -> tuple[bool, bool, bool]:
    """A test's place, from its markers; a stable sort keeps the order within each place.
    The cluster tests last: the session's shared cluster starts with the first of them and
    stops at the end, so no other test shares the two cores with an idle cluster's kubelets,
    API server and CoreDNS. Of them, those marked `last` run after the rest (they leave the
    shared cluster's nodes changed), and those marked `own_cluster` after those: they stop the
    shared cluster and start one of their own, so two clusters never share the two cores and
    nothing they do to theirs reaches another test."""
    cluster, last, own = ("cluster" in markers, "last" in markers, "own_cluster" in markers)
    return cluster, last or own, own
