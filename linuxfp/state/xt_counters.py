"""Adding to iptables-legacy's (and ip6tables-legacy's) rule counters what
the kernel never saw.

A packet the fast path decides never reaches x_tables, so `iptables-legacy
-L -v` would miss it. x_tables lets anyone add to a table's counters
(IPT_SO_SET_ADD_COUNTERS: one (packets, bytes) pair per entry of the table,
added on the calling CPU; iptables-legacy itself uses it after a replace),
so those counts can be given back rule by rule. nf_tables has no such call
(a rule's counter can only be reset, or replaced with the rule), so
iptables-nft's counters stay the kernel's own and `linuxfp stats` shows the
rest.

The counts are meant for the table the rules were read from: its
fingerprint (netfilter.py, counters left out) is compared with the one the
ruleset was read at, and the entries are found in the same blob the
comparison read. A replace landing between that read and the add (a few
microseconds) with the same number of entries would get the counts on the
wrong entries: counters only, never a verdict. The xtables lock that would
close it is not taken: iptables-legacy run without -w fails at once while
another process holds it.
"""
from __future__ import annotations

import errno
import struct

from . import netlink as nl
from .iptables import Ruleset
from .netfilter import (IPV4, IPV6, NF_INET_NUMHOOKS, XT_TABLE_MAXNAMELEN, XtFamily, _read_cache, fingerprint_of_blobs,
                        legacy_blobs, legacy_table_names, xt_socket)
from .xt_blob import HOOK_CHAINS, table_info

IPT_SO_SET_ADD_COUNTERS = 65            # IPT_BASE_CTL + 1 (IP6T_SO_SET_ADD_COUNTERS at SOL_IPV6 too)
# The add's refusals that a later try may not meet: a replace changed the
# table's entry count since it was read (EINVAL), the table went (ENOENT).
RETRIED_ERRNOS = frozenset({errno.EINVAL, errno.ENOENT})
# (struct ip6t_getinfo is laid out as struct ipt_getinfo: _IPT_GETINFO reads both)
FAMILIES = {family.name: family for family in (IPV4, IPV6)}
# struct xt_counters_info: name, num_counters, then u64-aligned counters
_COUNTERS_INFO = struct.Struct(f"={XT_TABLE_MAXNAMELEN}sI4x")
_COUNTER = struct.Struct("=QQ")         # struct xt_counters: pcnt, bcnt
_TARGET_NAME = struct.Struct("=H29s")   # struct xt_entry_target (user view): target_size, name
_ERROR_NAME_OFFSET = 32                 # the ERROR target's data (a chain's name) after its header


class TableChanged(Exception):
    """The legacy tables are not the ones the ruleset was read from."""


def entry_indexes(blob: bytes, family: XtFamily = IPV4) -> tuple[int, dict[tuple[str, int | None], int]]:
    """A table's number of entries, and the index of each rule's entry by
    (chain, position from 1) and of each built-in chain's policy by
    (chain, None), from its blob (GET_INFO, then the entries)."""
    valid_hooks, hook_entry, underflow, num_entries, entries = table_info(blob)
    starts = {hook_entry[h]: HOOK_CHAINS[h] for h in range(NF_INET_NUMHOOKS) if valid_hooks & (1 << h)}
    policies = {underflow[h] for h in range(NF_INET_NUMHOOKS) if valid_hooks & (1 << h)}
    found: dict[tuple[str, int | None], int] = {}
    chain, position, offset = None, 0, 0
    for index in range(num_entries):
        if offset + family.next_offset + 2 > len(entries):
            break
        target_offset, next_offset = struct.unpack_from("=HH", entries, offset + family.target_offset)
        name = _TARGET_NAME.unpack_from(entries, offset + target_offset)[1].split(b"\0", 1)[0]
        if offset in starts:
            chain, position = starts[offset], 0
        if name == b"ERROR":
            # a user chain's head names it; the table's last entry names "ERROR"
            label = entries[offset + target_offset + _ERROR_NAME_OFFSET:offset + next_offset].split(b"\0", 1)[0]
            chain, position = label.decode(errors="replace"), 0
        elif offset in policies:
            found[(chain, None)] = index
        elif chain is not None:
            # (a user chain's closing RETURN gets the position after its last rule: asked for by none)
            position += 1
            found[(chain, position)] = index
        if next_offset == 0:
            break
        offset += next_offset
    return num_entries, found


def add_counters(ruleset: Ruleset, table: str, additions: dict[tuple[str, int | None], tuple[int, int]]) -> None:
    """Add (packets, bytes) to the entries of `table` named by (chain,
    position) or (chain, None) for a built-in chain's policy. Raises
    TableChanged when the legacy tables changed since `ruleset` was read
    (the caller tries again once it has read them again)."""
    family = FAMILIES[ruleset.family]
    known = _read_cache.get((nl.netns_cookie(), "legacy", family.name))
    if known is None or known[1] is not ruleset:
        raise TableChanged("the legacy ruleset was read again since")
    names = legacy_table_names(family.names_file)
    blobs = legacy_blobs(names, family)
    blob = blobs.get(table)
    if not isinstance(blob, bytes) or fingerprint_of_blobs(names, blobs, family) != known[0]:
        raise TableChanged("the legacy tables changed since they were read")
    count, indexes = entry_indexes(blob, family)
    counters = bytearray(_COUNTER.size * count)
    for key, (packets, size) in additions.items():
        index = indexes.get(key)
        if index is None:
            raise TableChanged(f"{table} has no entry for {key[0]} "
                               f"{'policy' if key[1] is None else f'rule {key[1]}'}")
        _COUNTER.pack_into(counters, index * _COUNTER.size, packets, size)
    sock = xt_socket(family)
    try:
        sock.setsockopt(family.level, IPT_SO_SET_ADD_COUNTERS,
                        _COUNTERS_INFO.pack(table.encode(), count) + bytes(counters))
    finally:
        sock.close()
