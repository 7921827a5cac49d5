"""Scratch namespaces (tfmw.k8s.namespaces): made with labels and ready once their default
ServiceAccount is there, deleted with their pods, against an API answered from memory."""

from __future__ import annotations

import pytest

from tfmw.k8s import namespaces
from tfmw.k8s.api import ApiError


class _Api:
    """The calls namespaces makes, answered from memory: the ServiceAccount appears after
    `sa_after` looks (an ApiError on the first `errors` of them)."""

    def __init__(self, sa_after: int = 0, errors: int = 0, pods=()):
        self.sa_after, self.errors, self.looks = sa_after, errors, 0
        self.created, self.deleted = [], []
        self.pods = list(pods)

    def create(self, path, obj):
        self.created.append((path, obj))

    def get_or_none(self, path):
        if path.endswith("/serviceaccounts/default"):
            self.looks += 1
            if self.looks <= self.errors:
                raise ApiError(503, "busy")
            return {"metadata": {"name": "default"}} if self.looks > self.sa_after else None
        return None if f"/api/v1/namespaces/{self.name_deleted()}" == path else {}

    def name_deleted(self):
        return self.deleted[0][0].rsplit("/", 1)[-1] if self.deleted else ""

    def delete(self, path, body=None):
        self.deleted.append((path, body))
        self.pods = [p for p in self.pods if not path.endswith(f"/pods/{p}")]

    def items(self, path):
        return [{"metadata": {"name": p}} for p in self.pods]


def test_a_namespace_is_made_with_its_labels_and_ready_once_its_service_account_is_there():
    api = _Api(sa_after=2, errors=1)
    assert namespaces.create(api, "scratch", {"kueue-managed": "true"}, timeout=5)
    ((path, obj),) = api.created
    assert path == "/api/v1/namespaces" and obj == namespaces.namespace_object("scratch", {"kueue-managed": "true"})
    assert obj == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "scratch", "labels": {"kueue-managed": "true"}},
    }
    assert api.looks == 3  # an API error counts as not yet


def test_a_service_account_that_never_comes_is_said_not_raised():
    assert not namespaces.create(_Api(sa_after=10**6), "scratch", timeout=0.3)


def test_a_namespace_is_deleted_with_its_pods_at_once_and_waited_for():
    api = _Api(pods=["w-0", "w-1"])
    namespaces.delete(api, "scratch", force_pods=True)
    assert api.deleted == [
        ("/api/v1/namespaces/scratch", None),
        ("/api/v1/namespaces/scratch/pods/w-0", {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}),
        ("/api/v1/namespaces/scratch/pods/w-1", {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}),
    ]
    assert namespaces.wait_pods_gone(api, "scratch", 1) and namespaces.wait_gone(api, "scratch", 1)


def test_waiting_for_a_namespace_to_go_ends_at_its_timeout_or_an_api_error():
    api = _Api(pods=["w-0"])
    namespaces.delete(api, "scratch")
    assert api.deleted == [("/api/v1/namespaces/scratch", None)]
    assert not namespaces.wait_pods_gone(api, "scratch", 0.3)

    def unreachable(path):
        raise ApiError(0, "connection refused")

    api.items = unreachable
    with pytest.raises(ApiError):
        namespaces.wait_pods_gone(api, "scratch", 5)
