"""make status's placement line: over how many topology domains the group sits."""

from __future__ import annotations

from tfmw.deploy import placement
from tfmw.k8s.api import ApiError

KEY = "example.com/topology-rack"


def test_one_domain_and_the_largest_first_with_what_is_not_placed():
    domains = {"n1": "rack-a", "n2": "rack-a", "n3": "rack-b"}
    assert placement.placement_line(KEY, ["n1", "n2", "n1", "n2"], domains) == (
        f"placement by {KEY}: 4 workers in 1 domain (rack-a x 4)"
    )
    assert placement.placement_line(KEY, ["n3", "n1", "n2", "", ""], domains) == (
        f"placement by {KEY}: 3 workers in 2 domains (rack-a x 2, rack-b x 1); 2 not placed yet"
    )
    assert placement.placement_line(KEY, ["", ""], domains) == f"placement by {KEY}: no worker placed yet"


def test_a_node_without_the_label_is_said_and_many_domains_stay_one_line():
    assert placement.placement_line(KEY, ["n9"], {}) == f"placement by {KEY}: 1 worker in 1 domain ((no label) x 1)"
    nodes = [f"n{i}" for i in range(20)]
    line = placement.placement_line(KEY, nodes, {node: f"rack-{i:02d}" for i, node in enumerate(nodes)})
    assert line.startswith(f"placement by {KEY}: 20 workers in 20 domains (rack-00 x 1, ")
    assert line.endswith("rack-07 x 1, and 12 more)") and "rack-08" not in line


class Nodes:
    """The one call status_line makes of the client: a nodes LIST with a label selector."""

    def __init__(self, nodes=(), error: ApiError | None = None):
        self.nodes, self.error, self.asked = list(nodes), error, []

    def items(self, path, **query):
        self.asked.append((path, query))
        if self.error:
            raise self.error
        return [n for n in self.nodes if query["labelSelector"] in n["metadata"]["labels"]]


def node(name: str, **labels) -> dict:
    return {"metadata": {"name": name, "labels": labels}}


def pod(node_name: str) -> dict:
    return {"spec": {"nodeName": node_name}} if node_name else {"spec": {}}


STS = {"metadata": {"annotations": {placement.TOPOLOGY_ANNOTATION: KEY}}}


def test_status_reads_the_key_from_the_statefulset_and_lists_only_labelled_nodes():
    api = Nodes([node("a", **{KEY: "r1"}), node("b", **{KEY: "r2"}), node("c")])
    assert placement.status_line(api, STS, [pod("a"), pod("b"), pod("")]) == (
        f"placement by {KEY}: 2 workers in 2 domains (r1 x 1, r2 x 1); 1 not placed yet"
    )
    assert api.asked == [("/api/v1/nodes", {"labelSelector": KEY})]


def test_a_release_not_placed_by_topology_says_nothing_and_asks_nothing():
    api = Nodes()
    assert placement.status_line(api, {"metadata": {"annotations": {}}}, [pod("a")]) == ""
    assert placement.status_line(api, None, []) == "" and api.asked == []


def test_without_the_right_to_list_nodes_it_says_so_and_what_is_needed():
    api = Nodes(error=ApiError(403, 'nodes is forbidden: User "dev" cannot list resource "nodes"'))
    line = placement.status_line(api, STS, [pod("a")])
    assert line.startswith(f"placement by {KEY}: unknown, the nodes cannot be listed (HTTP 403: nodes is forbidden")
    assert line.endswith("it needs `list nodes`")
