#!/usr/bin/env bash
# The Debian packages the local cluster's nodes and the worker image build need
# (`make host-packages`, run by `make test` and `make cluster`): installed with apt when one is
# missing and this is root; otherwise one line saying which are missing and how to get them.
#   containerd runc containernetworking-plugins catatonit  a node's runtime, CNI, the pod sandbox
#   nftables conntrack iproute2 util-linux                 kube-proxy's rules, namespaces (nsenter/unshare)
#   iptables ipset                                         kube-router's NetworkPolicy rules and address sets
#   podman buildah debootstrap debian-archive-keyring      the worker image and its Debian-made base
#   prometheus                                             promtool (the chart's alert rules) and the
#                                                          cluster's Prometheus that scrapes the workers
#   docker-registry apache2-utils                          the cluster's OCI registry (CNCF Distribution)
#                                                          and its htpasswd file
set -euo pipefail
PACKAGES=(containerd runc containernetworking-plugins catatonit nftables conntrack iproute2 util-linux
          iptables ipset podman buildah debootstrap debian-archive-keyring ca-certificates
          prometheus docker-registry apache2-utils)
missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "host-packages: missing ${missing[*]} (the local cluster and the image build need them): apt-get install ${missing[*]}" >&2
  exit 0   # not fatal: make local and the fast tests need none of them; the cluster tests say why they skip
fi
echo "host-packages: installing ${missing[*]} with apt (one-time)…"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q "${missing[@]}" >/dev/null
echo "host-packages: installed ${missing[*]}"
