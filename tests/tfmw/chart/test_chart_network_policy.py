"""The NetworkPolicies' egress goes where the release needs it and nowhere else: DNS to the
cluster DNS only (networkPolicy.egress.dnsTo), the API server at its endpoint addresses, found
by Helm's `lookup` at install or given (networkPolicy.egress.apiServer), and a refusal where
they must be known and are not. The lookup is answered by a stand-in API server
(tests/support/stubapi) holding the EndpointSlices a test gives it, with the real Helm 3 and 4;
offline renders get the documented fallback."""

from __future__ import annotations

import chartkit
import pytest
import stubapi
from chartkit import one, overlay_path

from tfmw.chart import helmkit

FULLNAME = f"{chartkit.RELEASE}-tf-multiworker"
KUBE_DNS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}
DNS_PORTS = [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]
ANY_API = {"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]}


def api_slice(service: str, address_type: str, addresses: list[str], port: int) -> dict:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{service}-{address_type.lower()}",
            "namespace": "default",
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": address_type,
        "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addresses],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    }


def online(helm: str, tmp_path, slices: list[dict], sets=()):
    """The chart rendered with its lookups answered (tests/support/stubapi: `helm template
    --dry-run=server` against a stand-in API server holding `slices`): (exit code, objects or
    stderr)."""
    with stubapi.serving(slices, tmp_path) as kubeconfig:
        result = stubapi.server_render(helm, kubeconfig, sets)
    if result.returncode:
        return result.returncode, result.stderr
    return 0, helmkit.parse_manifests(result.stdout)


def egress(objects, name: str = "workers") -> list[dict]:
    return one(objects, "NetworkPolicy", f"{FULLNAME}-{name}")["spec"]["egress"]


# ---------------------------------------------------------------- DNS


def test_dns_goes_to_the_kube_dns_pods_only_by_default(helm, render):
    objects = render(helm, sets=("workers.gpus=0",))
    for name in ("workers", "test"):
        dns = [rule for rule in egress(objects, name) if rule["ports"] == DNS_PORTS]
        assert dns == [{"to": [KUBE_DNS], "ports": DNS_PORTS}], name
    assert not any("to" not in rule and rule["ports"] == DNS_PORTS for rule in egress(objects))


def test_dns_to_is_overridable_and_the_local_overlay_adds_the_host_dns(helm, render):
    objects = render(helm, sets=("workers.gpus=0", "networkPolicy.egress.dnsTo[0].ipBlock.cidr=169.254.20.10/32"))
    assert egress(objects)[1] == {"to": [{"ipBlock": {"cidr": "169.254.20.10/32"}}], "ports": DNS_PORTS}
    local = egress(render(helm, overlay_path("local")))
    assert local[1]["to"] == [KUBE_DNS, {"ipBlock": {"cidr": "198.19.0.0/16"}}]


def test_an_empty_dns_to_is_refused_while_dns_is_allowed(helm, tmp_path):
    error = chartkit.template_error(helm, sets=("networkPolicy.egress.dnsTo=null",))
    line = next(line for line in error.splitlines() if "dnsTo" in line)
    assert "networkPolicy.egress.dnsTo is empty" in line and "networkPolicy.egress.allowDns=false" in line
    empty = tmp_path / "empty.yaml"
    empty.write_text("networkPolicy:\n  egress:\n    dnsTo: []\n")
    assert "networkPolicy.egress.dnsTo is empty" in chartkit.template_error(helm, [empty])
    chartkit.template(helm, sets=("networkPolicy.egress.dnsTo=null", "networkPolicy.egress.allowDns=false"))


@pytest.mark.parametrize(
    "key",
    [
        "networkPolicy.egress.dnsTo",
        "networkPolicy.egress.apiServer.to",
        "networkPolicy.metricsFrom",
        "networkPolicy.tensorboardFrom",
        "networkPolicy.egress.extraRules[0].to",
    ],
)
def test_a_peer_with_an_ip_block_and_a_selector_is_refused(helm, key):
    sets = (f"{key}[0].ipBlock.cidr=10.0.0.1/32", f"{key}[0].podSelector.matchLabels.app=x")
    error = chartkit.template_error(helm, sets=sets)
    line = next(line for line in error.splitlines() if "has an ipBlock and a selector" in line)
    assert f"{key}[0] has an ipBlock and a selector" in line and "--set-json" in line


def test_a_set_index_over_the_local_overlays_dns_list_is_refused_not_merged(helm):
    # --set merges into the overlay's first entry (the kube-dns pods): one peer with both
    error = chartkit.template_error(
        helm, [overlay_path("local")], sets=("networkPolicy.egress.dnsTo[0].ipBlock.cidr=10.0.0.1/32",)
    )
    assert "networkPolicy.egress.dnsTo[0] has an ipBlock and a selector" in error
    replaced = chartkit.template(
        helm, [overlay_path("local")], sets=(), show_only=("templates/networkpolicy.yaml",)
    )  # the overlay alone renders: its ipBlock and its selectors are separate entries
    assert egress(replaced)[1]["to"][1] == {"ipBlock": {"cidr": "198.19.0.0/16"}}


# ---------------------------------------------------------------- the API server, offline


def test_offline_the_api_server_ports_go_to_any_address_unless_required(helm, render):
    assert egress(render(helm, sets=("workers.gpus=0",)))[-1] == ANY_API
    required = egress(render(helm, sets=("workers.gpus=0", "networkPolicy.egress.apiServer.required=true")))
    assert not any(p.get("port") in (443, 6443) for rule in required for p in rule["ports"])
    assert len(required) == 2  # workers and DNS: no rule without a destination


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_overlays_with_api_access_require_the_api_servers_addresses(helm, render, env):
    sets = ("image.digest=sha256:" + "0" * 64,) if env == "prod" else ()
    objects = render(helm, overlay_path(env), sets=sets)
    assert one(objects, "Role")  # these overlays do have API access
    rules = egress(objects)
    assert all("to" in rule for rule in rules), rules  # offline: no rule to any address
    assert not any(p.get("port") in (443, 6443) for rule in rules for p in rule["ports"])
    given = egress(
        render(helm, overlay_path(env), sets=(*sets, "networkPolicy.egress.apiServer.to[0].ipBlock.cidr=10.0.0.1/32"))
    )
    assert given[-1]["to"] == [{"ipBlock": {"cidr": "10.0.0.1/32"}}]


def test_prod_admits_metrics_from_the_monitoring_prometheus_only(helm, render):
    objects = render(helm, overlay_path("prod"), sets=("image.digest=sha256:" + "0" * 64,))
    ingress = one(objects, "NetworkPolicy", f"{FULLNAME}-workers")["spec"]["ingress"]
    metrics = [rule for rule in ingress if rule["ports"] == [{"port": 9090, "protocol": "TCP"}]]
    assert metrics == [
        {
            "from": [
                {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
                }
            ],
            "ports": [{"port": 9090, "protocol": "TCP"}],
        }
    ]


# ---------------------------------------------------------------- the API server, found at install


def test_found_endpoints_become_one_address_blocks_on_the_slices_ports(helm, tmp_path):
    slices = [
        api_slice("kubernetes", "IPv4", ["172.18.0.2", "172.18.0.3"], 6443),
        api_slice("kubernetes", "IPv6", ["fd00::2"], 6443),
        api_slice("other", "IPv4", ["10.9.9.9"], 443),  # another Service's slice: not the API server
    ]
    code, objects = online(
        helm, tmp_path, slices, sets=("workers.gpus=0", "evaluator.enabled=true", "storage.type=createClaim")
    )
    assert code == 0, objects
    v4 = {
        "to": [{"ipBlock": {"cidr": "172.18.0.2/32"}}, {"ipBlock": {"cidr": "172.18.0.3/32"}}],
        "ports": [{"port": 6443, "protocol": "TCP"}],
    }
    v6 = {"to": [{"ipBlock": {"cidr": "fd00::2/128"}}], "ports": [{"port": 6443, "protocol": "TCP"}]}
    assert egress(objects)[-2:] == [v4, v6]
    assert egress(objects, "evaluator")[-2:] == [v4, v6]
    assert all("to" in rule for rule in egress(objects))


def test_given_addresses_win_over_the_lookup(helm, tmp_path):
    slices = [api_slice("kubernetes", "IPv4", ["172.18.0.2"], 6443)]
    sets = ("workers.gpus=0", "networkPolicy.egress.apiServer.to[0].ipBlock.cidr=10.0.0.1/32")
    code, objects = online(helm, tmp_path, slices, sets=sets)
    assert code == 0, objects
    assert egress(objects)[-1] == {"to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}], **ANY_API}


def test_an_install_that_finds_no_api_server_is_refused_where_required(helm, tmp_path):
    other = [api_slice("other", "IPv4", ["10.9.9.9"], 443)]
    code, error = online(helm, tmp_path, other, sets=("workers.gpus=0", "networkPolicy.egress.apiServer.required=true"))
    assert code != 0
    line = next(line for line in error.splitlines() if "apiServer" in line)
    assert (
        "networkPolicy.egress.apiServer.required=true but the cluster's `kubernetes` Service has no EndpointSlice"
        in line
    )
    assert "networkPolicy.egress.apiServer.to" in line and "required=false" in line
    # not required: the old any-address rule, as offline
    code, objects = online(helm, tmp_path, other, sets=("workers.gpus=0",))
    assert code == 0, objects
    assert egress(objects)[-1] == ANY_API
