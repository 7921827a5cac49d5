"""The dev cluster's certificates carry what Kubernetes reads from them (the cluster tests use
them for real: the API server, etcd, the kubelets)."""

from __future__ import annotations

import ipaddress
import ssl

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tfmw.devcluster import pki


def load(pair: pki.CertPair) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pair.cert.read_bytes())


def names(cert: x509.Certificate, oid) -> list[str]:
    return [a.value for a in cert.subject.get_attributes_for_oid(oid)]


def test_identities_sans_and_usages(tmp_path):
    made = pki.make_cluster_pki(tmp_path, "10.88.0.1", "10.96.0.1", ["k0-n1"], node_ips={"k0-n1": "10.88.0.11"})
    ca = load(made.ca)
    admin, node, apiserver = load(made.admin), load(made.nodes["k0-n1"]), load(made.apiserver)
    assert names(admin, NameOID.COMMON_NAME) == ["tfmw-admin"] and names(admin, NameOID.ORGANIZATION_NAME) == [
        "system:masters"
    ]
    assert names(node, NameOID.COMMON_NAME) == ["system:node:k0-n1"]
    assert names(node, NameOID.ORGANIZATION_NAME) == ["system:nodes"]
    for cert in (admin, node, apiserver):
        cert.verify_directly_issued_by(ca)
    usages = admin.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    san = apiserver.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(ip) for ip in san.get_values_for_type(x509.IPAddress)} == {"10.88.0.1", "127.0.0.1", "10.96.0.1"}
    assert "kubernetes.default.svc.cluster.local" in san.get_values_for_type(x509.DNSName)
    serving = load(made.node_serving["k0-n1"]).extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert ipaddress.ip_address("10.88.0.11") in serving.value.get_values_for_type(x509.IPAddress)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert all((tmp_path / f).stat().st_mode & 0o777 == 0o600 for f in ("ca.key", "admin.key", "sa.key"))
    assert b"BEGIN PUBLIC KEY" in made.service_accounts.cert.read_bytes()


def test_a_serving_pair_is_trusted_through_its_own_chain(tmp_path):
    pair = pki.serving_pair(tmp_path, "server", ["127.0.0.1"])
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(pair.cert, pair.key)  # the leaf first, then the CA
    client = ssl.create_default_context(cafile=str(pair.cert))
    assert client.get_ca_certs()[0]["subject"] == ((("commonName", "tf-multiworker local cluster CA"),),)


def test_the_front_proxy_client_is_signed_by_a_ca_of_its_own(tmp_path):
    """What an aggregated API server (Kueue's visibility API) trusts for forwarded requests:
    a client certificate named as the API server's --requestheader-allowed-names, from a CA
    that signs nothing else (a client certificate of the cluster CA must not pass as it)."""
    made = pki.make_cluster_pki(tmp_path, "10.88.0.1", "10.96.0.1", ["k0-n1"])
    client, front_ca, ca = load(made.front_proxy_client), load(made.front_proxy_ca), load(made.ca)
    client.verify_directly_issued_by(front_ca)
    assert names(client, NameOID.COMMON_NAME) == [pki.FRONT_PROXY_CLIENT]
    assert front_ca.subject != ca.subject and made.front_proxy_ca.cert != made.ca.cert
    assert list(client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.CLIENT_AUTH
    ]
