"""Where the group sits, for `make status`: over how many domains of its topology label
(scheduling.topology.key, recorded on the StatefulSet as TOPOLOGY_ANNOTATION) the workers were
placed, and how many in each. A group spread over more domains than it needs all-reduces
across the spine; this line is how an operator sees it without reading every pod's node."""

from __future__ import annotations

from collections import Counter

from tfmw.k8s.api import Api, ApiError

TOPOLOGY_ANNOTATION = "tf-multiworker/topology-key"  # charts/tf-multiworker/templates/statefulset.yaml
SHOWN_DOMAINS = 8  # a line, not a list: the largest domains, then how many more
UNLABELLED = "(no label)"


def topology_key(statefulset: dict | None) -> str:
    """The label the release is placed by, or "" (pure)."""
    return (((statefulset or {}).get("metadata") or {}).get("annotations") or {}).get(TOPOLOGY_ANNOTATION, "")


def placement_line(key: str, pod_nodes: list[str], domain_of: dict[str, str]) -> str:
    """The status line (pure): `pod_nodes` are the workers' nodes ("" while not placed),
    `domain_of` maps a node to its value of `key`; a node without the label counts as its own
    "(no label)" domain, and the largest domains come first."""
    placed = [node for node in pod_nodes if node]
    domains = Counter(domain_of.get(node, UNLABELLED) for node in placed)
    waiting = len(pod_nodes) - len(placed)
    if not placed:
        return f"placement by {key}: no worker placed yet"
    ordered = sorted(domains.items(), key=lambda item: (-item[1], item[0]))
    shown = ", ".join(f"{domain} x {count}" for domain, count in ordered[:SHOWN_DOMAINS])
    more = len(ordered) - SHOWN_DOMAINS
    line = f"placement by {key}: {len(placed)} worker{'s' if len(placed) != 1 else ''} in {len(ordered)} domain"
    line += f"{'s' if len(ordered) != 1 else ''} ({shown}{f', and {more} more' if more > 0 else ''})"
    return line + (f"; {waiting} not placed yet" if waiting else "")


def node_domains(api: Api, key: str) -> dict[str, str]:
    """Each node's value of `key`, the nodes that carry it only (one LIST, filtered by the
    server); ApiError when nodes cannot be listed."""
    return {
        node["metadata"]["name"]: node["metadata"]["labels"][key]
        for node in api.items("/api/v1/nodes", labelSelector=key)
    }


def status_line(api: Api, statefulset: dict | None, pods: list[dict]) -> str:
    """`make status`'s placement line, or "" for a release not placed by topology."""
    key = topology_key(statefulset)
    if not key:
        return ""
    try:
        domains = node_domains(api, key)
    except ApiError as err:
        return f"placement by {key}: unknown, the nodes cannot be listed ({err}); it needs `list nodes`"
    return placement_line(key, [(pod.get("spec") or {}).get("nodeName", "") for pod in pods], domains)
