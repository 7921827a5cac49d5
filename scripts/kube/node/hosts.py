"""Cluster DNS names from EndpointSlices, as hosts-file lines (what CoreDNS would answer).

Pure. A pod of a headless Service with `hostname` + `subdomain` (every StatefulSet pod, an
Indexed Job pod with `subdomain`) is `<hostname>.<service>.<namespace>.svc.<domain>` once,
and only once, the EndpointSlice controller lists it: the real controller decides when a
worker's name starts to resolve (with `publishNotReadyAddresses`, as soon as it has an IP).
"""
from __future__ import annotations


def hosts_lines(slices: list[dict], services: list[dict], domain: str = "cluster.local") -> list[str]:
    headless = {(s["metadata"]["namespace"], s["metadata"]["name"]) for s in services
                if (s.get("spec") or {}).get("clusterIP") == "None"}
    lines = set()
    for es in slices:
        meta = es.get("metadata") or {}
        ns = meta.get("namespace")
        service = (meta.get("labels") or {}).get("kubernetes.io/service-name")
        if (ns, service) not in headless or es.get("addressType") not in ("IPv4", None):
            continue
        for endpoint in es.get("endpoints") or []:
            hostname = endpoint.get("hostname")
            addresses = endpoint.get("addresses") or []
            if not hostname or not addresses:
                continue
            lines.add(f"{addresses[0]}\t{hostname}.{service}.{ns}.svc.{domain}")
    return sorted(lines)
