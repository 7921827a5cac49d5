"""Scratch namespaces: the fault harness's runs, the peers' runs, the bench's rounds and the cluster
tests each get one of their own, made and removed here.

    create(api, "ns", {"team": "a"})          -> the namespace made; True once its `default`
                                                  ServiceAccount is there (False: not within the wait)
    delete(api, "ns", force_pods=True)         the namespace deleted (and its pods at once)
    wait_gone(api, "ns", 180)                  -> True once the namespace itself is gone
    wait_pods_gone(api, "ns", 180)             -> True once it has no pod left

A namespace is ready for pods only once the ServiceAccount controller made its `default`
ServiceAccount: until then the API server refuses the namespace's pods (their controller
retries them later), which is not what a measured start should include.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tfmw.k8s.api import Api, ApiError, ns_path

SERVICE_ACCOUNT_SECONDS = 60.0
POLL_SECONDS = 0.2
NAMESPACES = "/api/v1/namespaces"


def namespace_object(name: str, labels: dict | None = None) -> dict:
    """The Namespace `name` with `labels` (pure)."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels or {})}}


def _until(predicate: Callable[[], object], timeout: float, interval: float, errors_wait: bool = False) -> bool:
    """Poll predicate() until truthy (True) or `timeout` seconds (False). An ApiError ends the
    wait, unless `errors_wait`: then it counts as not yet (the server may be busy right then)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return True
        except ApiError:
            if not errors_wait:
                raise
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def create(api: Api, name: str, labels: dict | None = None, timeout: float = SERVICE_ACCOUNT_SECONDS) -> bool:
    """Make namespace `name` (ApiError when the server refuses), then wait until its `default`
    ServiceAccount is there: whether it came within `timeout` seconds."""
    api.create(NAMESPACES, namespace_object(name, labels))
    return wait_service_account(api, name, timeout)


def wait_service_account(api: Api, name: str, timeout: float = SERVICE_ACCOUNT_SECONDS) -> bool:
    """Whether namespace `name`'s `default` ServiceAccount is there within `timeout` seconds (an
    API error meanwhile is waited out: the namespace was just made)."""
    sa = ns_path(name, "serviceaccounts", "default")
    return _until(lambda: api.get_or_none(sa), timeout, POLL_SECONDS, errors_wait=True)


def delete(api: Api, name: str, force_pods: bool = False) -> None:
    """Delete namespace `name` (no new pod can be made in it from then on); with `force_pods`,
    also remove its pods at once (grace period 0: their node kills their processes) instead of
    each waiting out its grace period. ApiError when the server refuses."""
    api.delete(f"{NAMESPACES}/{name}")
    if force_pods:
        for pod in api.items(ns_path(name, "pods")):
            api.delete(
                ns_path(name, "pods", pod["metadata"]["name"]),
                {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
            )


def wait_gone(api: Api, name: str, timeout: float, interval: float = 1.0) -> bool:
    """Whether namespace `name` is gone (its namespace controller done) within `timeout` seconds;
    ApiError when the server does not answer."""
    return _until(lambda: api.get_or_none(f"{NAMESPACES}/{name}") is None, timeout, interval)


def wait_pods_gone(api: Api, name: str, timeout: float, interval: float = POLL_SECONDS) -> bool:
    """Whether namespace `name` has no pod left within `timeout` seconds (the namespace controller
    may still be removing the rest); ApiError when the server does not answer."""
    return _until(lambda: not api.items(ns_path(name, "pods")), timeout, interval)
