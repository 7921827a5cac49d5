"""An OCI registry on the local cluster, as a cluster's users meet one: CNCF Distribution
(Debian's `docker-registry`) on the cluster's bridge address, TLS with a certificate the
cluster's CA signed, htpasswd (bcrypt) authentication. What goes through it: the chart
(`make chart-push`, then `helm install oci://...`) and the worker image (`podman push`, then the
nodes' containerd pulls it with an imagePullSecrets Secret).

- The nodes trust it through containerd's registry hosts directory (nodes.py sets `config_path`
  to <state>/registry/certs.d; here `<address>/hosts.toml` names the CA), never through the
  host's own trust store; credentials reach them only in the pod's pull secret.
- podman and helm on the host are given the CA per call (`--cert-dir`, `--ca-file`) and the
  credentials in an auth file of their own (`Registry.login`).
- It stops with the cluster (controlplane.down stops every process the state records).

    python -m tfmw.devcluster.registry start|stop [--state DIR]   (on a running `make cluster`)
"""

from __future__ import annotations

import base64
import json
import secrets
import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tfmw.devcluster import controlplane, nodes, pki
from tfmw.devcluster.addoncli import addon_main

PORT = 5000
USER = "tfmw"
BINARY = "docker-registry"


class RegistryError(Exception):
    """One line: why the registry could not start."""


@dataclass(frozen=True)
class Registry:
    host: str  # address:port
    username: str
    password: str
    ca_file: Path  # the cluster's CA (it signed the registry's certificate)
    cert_dir: Path  # podman's --cert-dir: the CA as <dir>/ca.crt
    auth_file: Path  # podman's and helm's credentials for it

    def pull_secret(self, namespace: str, name: str = "regcred") -> dict:
        """A kubernetes.io/dockerconfigjson Secret the nodes pull with."""
        auth = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        config = {"auths": {self.host: {"username": self.username, "password": self.password, "auth": auth}}}
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "type": "kubernetes.io/dockerconfigjson",
            "stringData": {".dockerconfigjson": json.dumps(config)},
        }


def directory(state: controlplane.ClusterState) -> Path:
    return state.dir / "registry"


def hosts_dir(state: controlplane.ClusterState) -> Path:
    """containerd's registry hosts directory of every node (nodes.containerd_config)."""
    return nodes.registry_hosts_dir(state.dir)


def hosts_toml(host: str, ca_file: Path) -> str:
    return (
        f'server = "https://{host}"\n\n'
        f'[host."https://{host}"]\n  capabilities = ["pull", "resolve"]\n  ca = "{ca_file}"\n'
    )


def _answers(host: str, ca_file: Path) -> bool:
    """Does the registry answer its API root (401 without credentials: it is up and wants them)?"""
    context = ssl.create_default_context(cafile=str(ca_file))
    try:
        urllib.request.urlopen(f"https://{host}/v2/", timeout=2, context=context)
        return True
    except urllib.error.HTTPError as err:
        return err.code == 401
    except (urllib.error.URLError, OSError):
        return False


def load(state: controlplane.ClusterState) -> Registry | None:
    try:
        data = json.loads((directory(state) / "registry.json").read_text())
    except (OSError, ValueError):
        return None
    return Registry(**{k: Path(v) if k.endswith(("_file", "_dir")) else v for k, v in data.items()})


def start(state: controlplane.ClusterState, say=print) -> Registry:
    """The registry of this cluster, started if it is not running. Idempotent."""
    running = load(state)
    if running is not None and controlplane.is_ours(state.pids.get("registry", 0), state.created.get("registry")):
        return running
    binary = shutil.which(BINARY)
    if binary is None or shutil.which("htpasswd") is None:
        raise RegistryError("docker-registry or htpasswd is missing: make host-packages installs them (apt)")
    root = directory(state)
    root.mkdir(parents=True, exist_ok=True)
    host = f"{state.address}:{PORT}"
    ca = pki.CertPair(state.pki_dir / "ca.crt", state.pki_dir / "ca.key")
    serving = pki.issue(ca, root, "registry", state.address, server_ips=[state.address])
    password = secrets.token_urlsafe(18)
    htpasswd = subprocess.run(["htpasswd", "-Bbn", USER, password], capture_output=True, text=True, check=True)
    (root / "htpasswd").write_text(htpasswd.stdout)
    config = {
        "version": 0.1,
        "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": str(root / "data")}, "delete": {"enabled": True}},
        "http": {"addr": host, "tls": {"certificate": str(serving.cert), "key": str(serving.key)}},
        "auth": {"htpasswd": {"realm": "tf-multiworker local registry", "path": str(root / "htpasswd")}},
    }
    (root / "config.yml").write_text(json.dumps(config))
    cert_dir = root / "client"
    cert_dir.mkdir(exist_ok=True)
    shutil.copy(ca.cert, cert_dir / "ca.crt")
    node_hosts = hosts_dir(state) / host
    node_hosts.mkdir(parents=True, exist_ok=True)
    (node_hosts / "hosts.toml").write_text(hosts_toml(host, ca.cert))
    proc = controlplane.spawn([binary, "serve", str(root / "config.yml")], state.dir / "logs" / "registry.log")
    state.pids["registry"], state.created["registry"] = proc.pid, controlplane.started_at(proc.pid)
    state.save()
    deadline = time.monotonic() + 20
    while not _answers(host, ca.cert):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RegistryError(
                f"the registry did not answer on https://{host} (its log: {state.dir}/logs/registry.log)"
            )
        time.sleep(0.2)
    registry = Registry(host, USER, password, ca.cert, cert_dir, root / "auth.json")
    registry.auth_file.write_text(
        json.dumps({"auths": {host: {"auth": base64.b64encode(f"{USER}:{password}".encode()).decode()}}})
    )
    (root / "registry.json").write_text(
        json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in registry.__dict__.items()})
    )
    say(f"registry: https://{host} (user {USER}; CA {ca.cert}); the nodes trust it, pulls need a pull secret")
    return registry


def stop(state: controlplane.ClusterState) -> None:
    controlplane.stop_pid(state.pids.get("registry", 0), state.created.get("registry"), 5.0)
    shutil.rmtree(directory(state), ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    verbs = {"start": start, "stop": stop}
    return addon_main(
        argv, "registry", __doc__, verbs, (RegistryError, subprocess.CalledProcessError), without_api=("stop",)
    )


if __name__ == "__main__":
    sys.exit(main())
