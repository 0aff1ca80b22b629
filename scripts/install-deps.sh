#!/usr/bin/env bash
# Installs what LinuxFP needs on Debian 12, idempotently: system packages first
# (only the missing ones, after a single apt-get update), then the Python package.
set -euo pipefail

APT_PACKAGES=(
  clang llvm libbpf1 libbpf-dev linux-libc-dev libc6-dev bpftool
  iproute2 bridge-utils iptables nftables ipset ethtool tcpdump
  iputils-ping procps util-linux
  bird2
  # the Flannel lab (linuxfp lab flannel): flannel's store, the CNI plugins,
  # the Go that bootstraps the flanneld build, and the benchmark's traffic
  etcd-server etcd-client containernetworking-plugins golang-go iperf3
  python3 python3-pip
  # metrics (prometheus_client for Debian's python3; promtool, which checks
  # the output in the tests, comes only with the server: on a host booted
  # with systemd that enables prometheus.service too) and systemd-analyze,
  # which verifies the units
  python3-prometheus-client prometheus systemd
  # linuxfp graph --png
  graphviz
  # the container image (deploy/image/build-image) and its test run: runc
  # because crun refuses hybrid cgroup hierarchies
  mmdebstrap podman runc
)

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: must run as root (apt-get install)" >&2
  exit 1
fi

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
stamp="$here/.deps-installed"
if [ ! -f "$stamp" ] || [ "$here/pyproject.toml" -nt "$stamp" ]; then
  pip_flags=(-q --disable-pip-version-check)
  # Debian's own python3 refuses pip installs outside a venv (PEP 668); this
  # machine-wide tool is meant to be installed for root, so say so explicitly.
  if [ -f "$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')/EXTERNALLY-MANAGED" ]; then
    pip_flags+=(--break-system-packages)
  fi
  # [metrics]: already satisfied by python3-prometheus-client for Debian's
  # python3 (nothing downloaded); another interpreter gets it from PyPI.
  PIP_ROOT_USER_ACTION=ignore "$PYTHON" -m pip install "${pip_flags[@]}" -e "$here[test,bench,metrics]"
  touch "$stamp"
fi
