"""iptables-legacy tables decoded from the kernel's blob
(linuxfp/state/xt_blob.py) must be exactly the rules iptables-legacy-save
prints (the known, corpus, random and unknown rulesets of both decoders:
test_rule_decoders.py); here what is the blob's own: its chain structure,
jumps by offset, interface masks."""
from __future__ import annotations

import pytest

from linuxfp.lab.netns import Lab, entered
from linuxfp.state import xt_blob
from linuxfp.state.netfilter import legacy_blobs
from linuxfp.state.xt_extensions import Undecodable, xt_matches

from test_rule_decoders import _same
from test_rule_decoders import _both as decoded_both_ways

pytestmark = pytest.mark.netns


def _both(ns, family: str = "ip"):
    return decoded_both_ways(ns, family, "legacy")


def test_a_rule_without_target_and_a_jump_to_a_chain_called_next_stay_apart():
    with Lab(prefix="lfp-t") as lab:
        ns = lab.namespace("xt")
        ns.run(["iptables-legacy", "-N", "next"])
        ns.run(["iptables-legacy", "-A", "next", "-j", "DROP"])
        ns.run(["iptables-legacy", "-A", "FORWARD", "-s", "192.0.2.1"])
        _same(*_both(ns))
        ns.run(["iptables-legacy", "-A", "FORWARD", "-s", "192.0.2.1", "-j", "next"])
        tool, native = _both(ns)                # the second rule's content differs only in where it leads
        _same(tool, native)
        assert [r.target for r in native.table("filter").chain("FORWARD").rules] == ["", "next"]


@pytest.mark.parametrize("name, mask, text", [
    (b"eth0", b"\xff" * 5, "eth0"),
    (b"eth", b"\xff" * 3, "eth+"),
    (b"a\0b", b"\xff" * 3, None),              # the kernel compares the byte after the NUL too
    (b"a", b"\0\xff", None),                  # not a prefix
    (b"eth0", b"\xff" * 16, None),              # beyond the name's NUL
    (b"x+", b"\xff" * 3, None),                 # an exact "x+" would read as a wildcard
    (b"", b"", ""),
    (b"abcdefghijklmnop", b"\xff" * 16, None),  # 16 bytes without a NUL: no interface has that name
])
def test_interface_masks_are_read_only_as_iptables_writes_them(name, mask, text):
    name, mask = name.ljust(16, b"\0"), mask.ljust(16, b"\0")
    if text is None:
        with pytest.raises(Undecodable):
            xt_blob._interface(name, mask)
    else:
        assert xt_blob._interface(name, mask) == text


def test_icmp_type_255_is_any_type_whatever_its_code():
    decode = xt_matches[("icmp", 0)]
    assert decode(bytes([255, 0, 255, 0]) + bytes(4), "ip")[1][0].values == ("any",)
    with pytest.raises(Undecodable):
        decode(bytes([255, 3, 3, 0]) + bytes(4), "ip")
    # ICMPv6 compares type 255 like any other
    assert xt_matches[("icmp6", 0)](bytes([255, 3, 3, 0]) + bytes(4), "ip6")[1][0].values == ("255/3",)


def test_blobs_libiptc_would_not_write_go_to_the_tool():
    with Lab(prefix="lfp-t") as lab:
        ns = lab.namespace("xt")
        ns.run(["iptables-legacy-restore"], input="*filter\n:FORWARD ACCEPT [0:0]\n:LFPA - [0:0]\n:LFPB - [0:0]\n"
               "-A FORWARD -j LFPA\n-A LFPA -j DROP\n-A LFPB -j ACCEPT\nCOMMIT\n")
        with entered(ns):
            blob = legacy_blobs(("filter",))["filter"]
    assert xt_blob.decode_table("filter", blob).chain("LFPA").rules[0].target == "DROP"
    for label in (b"LFPA", b"ACCEPT", b"\0\0\0\0", b"FORWARD"):       # repeated, a verdict's, empty, built-in
        with pytest.raises(Undecodable):
            xt_blob.decode_table("filter", blob.replace(b"LFPB\0", label.ljust(4, b"\0")[:len(label)] + b"\0", 1)
                                 if len(label) <= 4 else blob.replace(b"LFPB\0\0\0\0", label + b"\0", 1))
