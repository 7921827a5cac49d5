"""The local control plane's certificates: one CA, every identity a client certificate.

Made with the `cryptography` library, ECDSA P-256 (fast to generate: a whole cluster's PKI
takes well under a second). The tests' HTTPS servers get theirs here too (tests/support).
Nothing here is a stand-in: the API server checks these client certificates
(`--client-ca-file`), authorizes the identities they carry with the Node and RBAC
authorizers, and signs service-account tokens with the service-account key.

Identities (CN / O as Kubernetes reads them):
    admin                     tfmw-admin / system:masters         the kubeconfig `make cluster` writes
    kube-controller-manager   system:kube-controller-manager
    kube-scheduler            system:kube-scheduler
    node-<name>               system:node:<name> / system:nodes    the node's kubelet
    cluster-services          tfmw:cluster-services               the volume provisioner
    kube-proxy                system:kube-proxy                   every node's kube-proxy (system:node-proxier)
    coredns                   tfmw:coredns                        CoreDNS's kubernetes plugin (system:coredns)
    apiserver-kubelet-client  kube-apiserver-kubelet-client       the API server calling a node (logs)
    apiserver-etcd-client     kube-apiserver-etcd-client          the API server calling etcd
    front-proxy-client        front-proxy-client                  the API server forwarding to an aggregated API
                                                                  (signed by front-proxy-ca, its own CA, as in kubeadm)
Serving certificates: apiserver (the cluster address, 127.0.0.1, kubernetes.default.svc...),
etcd (127.0.0.1), node-<name>-serving (the kubelet's HTTPS endpoint at the node's address).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

FRONT_PROXY_CLIENT = "front-proxy-client"  # the API server's --requestheader-allowed-names


class PkiError(Exception):
    """One-line reason the certificates could not be made."""


@dataclass(frozen=True)
class CertPair:
    cert: Path
    key: Path


def _new_key(path: Path) -> ec.EllipticCurvePrivateKey:
    """An ECDSA P-256 key, written as PKCS#8 PEM readable by its owner only."""
    key = ec.generate_private_key(ec.SECP256R1())
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)
    return key


def subject(cn: str, org: str | None = None) -> x509.Name:
    """CN (and O): what Kubernetes reads as the user (and group). `/` and `=` are refused:
    names that would read differently in another tool's subject syntax."""
    for part in (cn, org or ""):
        if "/" in part or "=" in part:
            raise PkiError(f"certificate name {part!r} may not contain '/' or '='")
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attributes)


def alt_names(dns: list[str], ips: list[str]) -> x509.SubjectAlternativeName:
    return x509.SubjectAlternativeName(
        [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    )


def _certificate(name: x509.Name, issuer: x509.Name, public_key, days: int) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # clocks of the nodes may lag a little
        .not_valid_after(now + datetime.timedelta(days=days))
    )


def _key_usage(*allowed: str) -> x509.KeyUsage:
    """keyUsage with the named bits set and every other one clear."""
    bits = (
        "digital_signature",
        "content_commitment",
        "key_encipherment",
        "data_encipherment",
        "key_agreement",
        "key_cert_sign",
        "crl_sign",
        "encipher_only",
        "decipher_only",
    )
    return x509.KeyUsage(**{bit: bit in allowed for bit in bits})


def make_ca(
    directory: Path, days: int = 3650, stem: str = "ca", cn: str = "tf-multiworker local cluster CA"
) -> CertPair:
    pair = CertPair(directory / f"{stem}.crt", directory / f"{stem}.key")
    key = _new_key(pair.key)
    name = subject(cn)
    cert = (
        _certificate(name, name, key.public_key(), days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            _key_usage("digital_signature", "key_cert_sign", "crl_sign"),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return pair


def issue(
    ca: CertPair,
    directory: Path,
    name: str,
    cn: str,
    org: str | None = None,
    *,
    server_dns: list[str] | None = None,
    server_ips: list[str] | None = None,
    days: int = 3650,
) -> CertPair:
    """A certificate signed by `ca`: a client certificate, and a serving one too when
    server_dns/server_ips are given."""
    pair = CertPair(directory / f"{name}.crt", directory / f"{name}.key")
    key = _new_key(pair.key)
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    ca_key = serialization.load_pem_private_key(ca.key.read_bytes(), password=None)
    serving = bool(server_dns or server_ips)
    usages = (
        [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
        if serving
        else [ExtendedKeyUsageOID.CLIENT_AUTH]
    )
    builder = (
        _certificate(subject(cn, org), ca_cert.subject, key.public_key(), days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            _key_usage("digital_signature", "key_encipherment"),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()), critical=False)
    )
    if serving:
        builder = builder.add_extension(alt_names(server_dns or [], server_ips or []), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return pair


def service_account_keys(directory: Path) -> CertPair:
    """The key pair that signs (private) and verifies (public) service-account tokens;
    `cert` holds the public key here."""
    pair = CertPair(directory / "sa.pub", directory / "sa.key")
    key = _new_key(pair.key)
    pair.cert.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return pair


def serving_pair(directory: Path, name: str, ips: list[str], days: int = 2) -> CertPair:
    """A CA of its own and a serving certificate for `ips` (a test's HTTPS server): `cert`
    holds the chain (the leaf, then the CA), so it is both what the server presents and
    what a client trusts."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = make_ca(directory)
    pair = issue(ca, directory, name, ips[0], server_ips=ips, days=days)
    pair.cert.write_bytes(pair.cert.read_bytes() + ca.cert.read_bytes())
    return pair


@dataclass(frozen=True)
class ClusterPki:
    ca: CertPair
    service_accounts: CertPair
    apiserver: CertPair
    etcd: CertPair
    apiserver_etcd_client: CertPair
    apiserver_kubelet_client: CertPair
    admin: CertPair
    controller_manager: CertPair
    scheduler: CertPair
    cluster_services: CertPair
    kube_proxy: CertPair
    network_policy: CertPair  # kube-router's network policy controller on every node
    coredns: CertPair
    nodes: dict[str, CertPair]  # kubelet client identity per node
    node_serving: dict[str, CertPair]  # kubelet HTTPS endpoint per node
    front_proxy_ca: CertPair  # what an aggregated API server (Kueue's visibility API) trusts
    front_proxy_client: CertPair  # the API server forwarding a request to it


def make_cluster_pki(
    directory: Path,
    address: str,
    service_ip: str,
    nodes: list[str],
    cluster_domain: str = "cluster.local",
    node_ips: dict[str, str] | None = None,
) -> ClusterPki:
    """Every certificate a cluster at `address` with these nodes needs, under `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    ca = make_ca(directory)
    front_proxy_ca = make_ca(directory, stem="front-proxy-ca", cn="tf-multiworker local front-proxy CA")
    api_dns = [
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        f"kubernetes.default.svc.{cluster_domain}",
    ]
    return ClusterPki(
        ca=ca,
        service_accounts=service_account_keys(directory),
        apiserver=issue(
            ca,
            directory,
            "apiserver",
            "kube-apiserver",
            server_dns=api_dns,
            server_ips=sorted({address, "127.0.0.1", service_ip}),
        ),
        etcd=issue(ca, directory, "etcd", "etcd", server_dns=["localhost"], server_ips=["127.0.0.1"]),
        apiserver_etcd_client=issue(ca, directory, "apiserver-etcd-client", "kube-apiserver-etcd-client"),
        apiserver_kubelet_client=issue(ca, directory, "apiserver-kubelet-client", "kube-apiserver-kubelet-client"),
        admin=issue(ca, directory, "admin", "tfmw-admin", "system:masters"),
        controller_manager=issue(ca, directory, "controller-manager", "system:kube-controller-manager"),
        scheduler=issue(ca, directory, "scheduler", "system:kube-scheduler"),
        cluster_services=issue(ca, directory, "cluster-services", "tfmw:cluster-services"),
        kube_proxy=issue(ca, directory, "kube-proxy", "system:kube-proxy"),
        network_policy=issue(ca, directory, "network-policy", "tfmw:network-policy"),
        coredns=issue(ca, directory, "coredns", "tfmw:coredns"),
        nodes={n: issue(ca, directory, f"node-{n}", f"system:node:{n}", "system:nodes") for n in nodes},
        node_serving={
            n: issue(
                ca,
                directory,
                f"node-{n}-serving",
                f"system:node:{n}",
                server_dns=[n, "localhost"],
                server_ips=sorted({address, "127.0.0.1", *([node_ips[n]] if node_ips and n in node_ips else [])}),
            )
            for n in nodes
        },
        front_proxy_ca=front_proxy_ca,
        front_proxy_client=issue(front_proxy_ca, directory, "front-proxy-client", FRONT_PROXY_CLIENT),
    )
