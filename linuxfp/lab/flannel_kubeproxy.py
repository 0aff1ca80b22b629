"""A representative kube-proxy (iptables mode) and kubelet ruleset, so a
lab node's netfilter looks like a real Kubernetes worker's.

The chains, jumps, marks and comments are the ones kube-proxy 1.2x and
kubelet install: KUBE-IPTABLES-HINT / KUBE-KUBELET-CANARY in mangle, the
KUBE-FIREWALL martian rule, KUBE-FORWARD with the 0x4000 masquerade mark,
KUBE-SERVICES → KUBE-SVC-* → KUBE-SEP-* with DNAT to the endpoint and
KUBE-MARK-MASQ / KUBE-POSTROUTING for hairpin and off-cluster clients.
kube-proxy puts its jumps first in the built-in chains (it prepends), so
they are inserted at position 1, ahead of flanneld's.

Applied with ``iptables-restore --noflush`` (iptables-nft, Debian's
default) so flanneld's own rules stay.
"""

from __future__ import annotations

import base64
import hashlib

from .flannel_state import Service, ServicePort

MASQ_MARK = "0x4000/0x4000"


def _chain_suffix(*parts: str) -> str:
    """kube-proxy's chain-name hash: base32 of a SHA-256, 16 characters."""
    digest = hashlib.sha256("".join(parts).encode()).digest()
    return base64.b32encode(digest).decode()[:16]


def service_chain(service: Service, port: ServicePort) -> str:
    return "KUBE-SVC-" + _chain_suffix(f"default/{service.name}:{port.protocol}{port.port}", port.protocol)


def endpoint_chain(service: Service, port: ServicePort) -> str:
    endpoint = f"{service.endpoint_ip}:{port.target_port}"
    return "KUBE-SEP-" + _chain_suffix(f"default/{service.name}:{port.protocol}{port.port}", port.protocol, endpoint)


def ruleset(service: Service, pod_network: str) -> str:
    """iptables-restore input for one node (the same on every node, as kube-proxy's is)."""
    mangle = [
        "*mangle",
        ":KUBE-IPTABLES-HINT - [0:0]",
        ":KUBE-KUBELET-CANARY - [0:0]",
        ":KUBE-PROXY-CANARY - [0:0]",
        "COMMIT",
    ]
    filter_ = [
        "*filter",
        ":KUBE-FIREWALL - [0:0]",
        ":KUBE-KUBELET-CANARY - [0:0]",
        ":KUBE-PROXY-CANARY - [0:0]",
        ":KUBE-EXTERNAL-SERVICES - [0:0]",
        ":KUBE-FORWARD - [0:0]",
        ":KUBE-NODEPORTS - [0:0]",
        ":KUBE-PROXY-FIREWALL - [0:0]",
        ":KUBE-SERVICES - [0:0]",
        # Inserted in reverse so they end up in kube-proxy's order at the top.
        '-I INPUT 1 -j KUBE-FIREWALL',
        '-I INPUT 1 -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES',
        '-I INPUT 1 -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS',
        '-I INPUT 1 -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL',
        '-I FORWARD 1 -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES',
        '-I FORWARD 1 -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        '-I FORWARD 1 -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD',
        '-I FORWARD 1 -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL',
        '-I OUTPUT 1 -j KUBE-FIREWALL',
        '-I OUTPUT 1 -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        '-I OUTPUT 1 -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL',
        '-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections"'
        ' -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP',
        '-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP',
        f'-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark {MASQ_MARK} -j ACCEPT',
        '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule"'
        ' -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT',
        "COMMIT",
    ]
    nat = [
        "*nat",
        ":KUBE-KUBELET-CANARY - [0:0]",
        ":KUBE-PROXY-CANARY - [0:0]",
        ":KUBE-MARK-MASQ - [0:0]",
        ":KUBE-NODEPORTS - [0:0]",
        ":KUBE-POSTROUTING - [0:0]",
        ":KUBE-SERVICES - [0:0]",
    ]
    nat += [f":{service_chain(service, p)} - [0:0]" for p in service.ports]
    nat += [f":{endpoint_chain(service, p)} - [0:0]" for p in service.ports]
    nat += [
        '-I PREROUTING 1 -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        '-I OUTPUT 1 -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        '-I POSTROUTING 1 -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
        f"-A KUBE-MARK-MASQ -j MARK --set-xmark {MASQ_MARK}",
        f"-A KUBE-POSTROUTING -m mark ! --mark {MASQ_MARK} -j RETURN",
        "-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0",
        '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully',
    ]
    for port in service.ports:
        svc, sep = service_chain(service, port), endpoint_chain(service, port)
        where = f"default/{service.name}:{port.protocol}{port.port}"
        proto = f"-p {port.protocol} -m {port.protocol}"
        nat += [
            f'-A KUBE-SERVICES -d {service.cluster_ip}/32 {proto} --dport {port.port}'
            f' -m comment --comment "{where} cluster IP" -j {svc}',
            f'-A {svc} ! -s {pod_network} -d {service.cluster_ip}/32 {proto} --dport {port.port}'
            f' -m comment --comment "{where} cluster IP" -j KUBE-MARK-MASQ',
            f'-A {svc} -m comment --comment "{where} -> {service.endpoint_ip}:{port.target_port}" -j {sep}',
            f'-A {sep} -s {service.endpoint_ip}/32 -m comment --comment "{where}" -j KUBE-MARK-MASQ',
            f'-A {sep} {proto} -m comment --comment "{where}"'
            f' -j DNAT --to-destination {service.endpoint_ip}:{port.target_port}',
        ]
    nat += [
        '-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule'
        ' in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS',
        "COMMIT",
    ]
    return "\n".join(mangle + filter_ + nat) + "\n"
