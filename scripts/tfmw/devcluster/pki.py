"""The local control plane's certificates: one CA, every identity a client certificate.

Made with the `openssl` CLI (no Python crypto dependency), ECDSA P-256 (fast to generate:
a whole cluster's PKI takes well under a second). Nothing here is a stand-in: the API
server checks these client certificates (`--client-ca-file`), authorizes the identities
they carry with the Node and RBAC authorizers, and signs service-account tokens with the
service-account key.

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
Serving certificates: apiserver (the cluster address, 127.0.0.1, kubernetes.default.svc...),
etcd (127.0.0.1), node-<name>-serving (the kubelet's HTTPS endpoint at the node's address).
"""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path


class PkiError(Exception):
    """One-line reason the certificates could not be made."""


@dataclass(frozen=True)
class CertPair:
    cert: Path
    key: Path


def _openssl(*args: str, cwd: Path | None = None) -> None:
    try:
        proc = subprocess.run(["openssl", *args], capture_output=True, text=True, cwd=cwd)
    except FileNotFoundError:
        raise PkiError("openssl not found: install it (Debian: apt-get install openssl)") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        raise PkiError(f"openssl {args[0]} failed: {last}")


def _key(path: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path))
    path.chmod(0o600)


def subject(cn: str, org: str | None = None) -> str:
    """An openssl -subj string; `/` and `=` in names are refused (they would split fields)."""
    for part in (cn, org or ""):
        if "/" in part or "=" in part:
            raise PkiError(f"certificate name {part!r} may not contain '/' or '='")
    return f"/CN={cn}" + (f"/O={org}" if org else "")


def san_line(dns: list[str], ips: list[str]) -> str:
    """subjectAltName value for openssl's config: DNS:..., IP:..."""
    return ",".join([f"DNS:{d}" for d in dns] + [f"IP:{i}" for i in ips])


def make_ca(directory: Path, days: int = 3650) -> CertPair:
    pair = CertPair(directory / "ca.crt", directory / "ca.key")
    _key(pair.key)
    _openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        str(pair.key),
        "-sha256",
        "-days",
        str(days),
        "-subj",
        subject("tf-multiworker local cluster CA"),
        "-out",
        str(pair.cert),
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
    )
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
    _key(pair.key)
    serving = bool(server_dns or server_ips)
    usage = "serverAuth,clientAuth" if serving else "clientAuth"
    ext = [
        "basicConstraints=critical,CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage={usage}",
    ]
    if serving:
        ext.append(f"subjectAltName={san_line(server_dns or [], server_ips or [])}")
    with tempfile.TemporaryDirectory() as tmp:
        csr = Path(tmp) / "req.csr"
        extfile = Path(tmp) / "ext.cnf"
        extfile.write_text("\n".join(ext) + "\n")
        _openssl("req", "-new", "-key", str(pair.key), "-subj", subject(cn, org), "-out", str(csr))
        _openssl(
            "x509",
            "-req",
            "-in",
            str(csr),
            "-CA",
            str(ca.cert),
            "-CAkey",
            str(ca.key),
            "-CAcreateserial",
            "-sha256",
            "-days",
            str(days),
            "-extfile",
            str(extfile),
            "-out",
            str(pair.cert),
        )
    return pair


def service_account_keys(directory: Path) -> CertPair:
    """The key pair that signs (private) and verifies (public) service-account tokens;
    `cert` holds the public key here."""
    pair = CertPair(directory / "sa.pub", directory / "sa.key")
    _key(pair.key)
    _openssl("pkey", "-in", str(pair.key), "-pubout", "-out", str(pair.cert))
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
    coredns: CertPair
    nodes: dict[str, CertPair]  # kubelet client identity per node
    node_serving: dict[str, CertPair]  # kubelet HTTPS endpoint per node


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
    )
