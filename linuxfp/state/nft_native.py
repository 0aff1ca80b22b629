"""Where native nf_tables tables (the `nft` tool's, not iptables-nft's) hook
in, read over nfnetlink: each chain's family, hook, type, policy and
devices, and the expressions its rules use (nested ones included); and, of
every table, the stateful objects, sets and flowtables. Enough for
graph/filtering/scope.py to tell which packets a native table can touch and
whether it turns connection tracking on; and the rules of the chains that
filter forwarded packets, read into iptables' model (nft_forward.py) for
the filter node to evaluate.

A read is of one nf_tables generation (read before and after; three tries).
Anything that cannot be read raises NativeUnreadable, and the caller treats
the tables as touching everything."""
from __future__ import annotations

import socket
import struct
from collections.abc import Iterable

from . import netlink as nl
from .kernel import release_at_least
from .model import NftChain, NftNative, NftObject
from .nft_forward import (FORWARD_FAMILIES, NFTA_SET_ELEM_LIST_SET, NFTA_SET_ELEM_LIST_TABLE, NFTA_SET_NAME,
                          NFT_MSG_GETSETELEM, NFT_MSG_NEWSETELEM, KeySet, constant_anonymous, forward_rulesets,
                          key_set, static_named)
from .nft_rules import (NF_ACCEPT, NF_DROP, NFT_MSG_GETCHAIN, NFT_MSG_GETRULE, NFT_MSG_NEWCHAIN, NFT_MSG_NEWRULE,
                        NFTA_CHAIN_HOOK, NFTA_CHAIN_NAME, NFTA_CHAIN_POLICY, NFTA_CHAIN_TABLE, NFTA_CHAIN_TYPE,
                        NFTA_EXPR_DATA, NFTA_EXPR_NAME, NFTA_HOOK_HOOKNUM, NFTA_HOOK_PRIORITY, NFTA_RULE_CHAIN,
                        NFTA_RULE_EXPRESSIONS, NFTA_RULE_TABLE, _NFGENMSG, nft_message)

NFT_MSG_NEWSET, NFT_MSG_GETSET = 9, 10
NFT_MSG_NEWOBJ, NFT_MSG_GETOBJ = 18, 19
NFT_MSG_NEWFLOWTABLE, NFT_MSG_GETFLOWTABLE = 22, 23
NFTA_HOOK_DEV, NFTA_HOOK_DEVS = 3, 4
NFTA_DEVICE_NAME, NFTA_DEVICE_PREFIX = 1, 2     # (a prefix: `device "eth*"`, 6.16 on)
NFTA_SET_TABLE, NFTA_OBJ_TABLE, NFTA_OBJ_TYPE, NFTA_FLOWTABLE_TABLE = 1, 1, 3, 1
NFTA_MATCH_NAME = NFTA_TARGET_NAME = 1                  # nft_compat: x_tables matches and targets
NFTA_DYNSET_SET_NAME = 1                                # the set a dynset writes
NFTA_DYNSET_EXPR, NFTA_DYNSET_EXPRESSIONS = 7, 10       # expressions a dynset gives its new elements

FAMILY_NUMBERS = {"inet": 1, "ip": socket.AF_INET, "arp": 3, "netdev": 5, "bridge": 7, "ip6": socket.AF_INET6}
# hook numbers per family (linux/netfilter.h, netfilter_arp.h, netfilter_bridge.h)
_INET_HOOKS = ("prerouting", "input", "forward", "output", "postrouting", "ingress")
HOOK_NAMES = {"netdev": ("ingress", "egress"), "arp": ("input", "output", "forward"), "bridge": _INET_HOOKS[:5],
              "inet": _INET_HOOKS, "ip": _INET_HOOKS[:5], "ip6": _INET_HOOKS[:5]}
# NFT_OBJECT_* (linux/netfilter/nf_tables.h)
OBJECT_TYPES = {1: "counter", 2: "quota", 3: "ct helper", 4: "limit", 5: "connlimit", 6: "tunnel",
                7: "ct timeout", 8: "secmark", 9: "ct expectation", 10: "synproxy"}


def _hooks_by_name() -> bool:
    """Whether this kernel binds netdev hooks by name (6.16's dynamic hook
    interface binding; checked here on 6.18: a renamed device leaves its
    chain, a new device of that name joins it)."""
    return release_at_least(6, 16)


HOOKS_BY_NAME = _hooks_by_name()


class NativeUnreadable(OSError):
    """The native tables could not be read as of one generation."""


def read_native_tables(tables: Iterable[str], generation: int | None = None) -> NftNative:
    """The chains of the native tables among `tables` (every nf_tables
    table, "family name" as netfilter.nft_tables() names them;
    netfilter.native_table says which are the nft tool's), and the objects,
    sets and flowtables of all of them. `generation`: the nf_tables
    generation read before `tables` was (saves reading it again)."""
    from .netfilter import native_table, nft_generation       # (netfilter imports this module)
    every: dict[str, set[str]] = {}
    for entry in tables:
        family, _, name = entry.partition(" ")
        if family not in FAMILY_NUMBERS:
            raise NativeUnreadable(f"nf_tables table {entry}: a family this reader does not know")
        if "\ufffd" in name:        # (its name, as the table list decoded it, would ask for another)
            raise NativeUnreadable(f"nf_tables table {entry}: a name that is not UTF-8")
        every.setdefault(family, set()).add(name)
    native = {family: {name for name in names if native_table(f"{family} {name}")} for family, names in every.items()}
    failure = "they kept changing while they were read"
    for _ in range(3):
        before = generation if generation is not None else nft_generation()
        generation = None
        if before is None:
            raise NativeUnreadable("the nf_tables generation cannot be read")
        try:
            read = _read(every, native)
        except (nl.NetlinkError, nl.DumpInterrupted) as exc:
            failure = f"cannot be dumped: {exc}"     # (read again if a commit came meanwhile)
        except (struct.error, IndexError, KeyError, UnicodeDecodeError) as exc:
            raise NativeUnreadable(f"a dump answer not understood here: {exc!r}") from None
        else:
            if nft_generation() == before:
                return read
            continue
        if nft_generation() == before:
            raise NativeUnreadable(failure)
    raise NativeUnreadable(failure)


def _read(every: dict[str, set[str]], native: dict[str, set[str]]) -> NftNative:
    """One dump of every family's chains, sets, objects and flowtables (a
    few of each, where the rules can be thousands: those only of the native
    tables, table by table)."""
    names = {number: name for name, number in FAMILY_NUMBERS.items()}
    chains, objects = [], []
    expressions: dict[tuple[str, str, str], set[str]] = {}
    rules: dict[tuple[str, str, str], int] = {}
    answers: dict[tuple[str, str, str], list[dict[int, bytes]]] = {}     # of the families forwarding filters see
    written: dict[tuple[str, str], set[str]] = {}     # per table, the sets its rules change (dynset)
    with nl.query_socket(nl.NETLINK_NETFILTER) as sock:
        for family in sorted(native):
            for table in sorted(native[family]):
                # the kernel dumps one table's rules when asked for it by name
                request = _NFGENMSG.pack(FAMILY_NUMBERS[family], 0, 0) + nl.attr(NFTA_RULE_TABLE,
                                                                                  table.encode() + b"\0")
                for _family, a in _answers(sock.dump(nft_message(NFT_MSG_GETRULE), request), NFT_MSG_NEWRULE):
                    key = (family, nl.strict_name(a[NFTA_RULE_TABLE]), nl.strict_name(a[NFTA_RULE_CHAIN]))
                    rules[key] = rules.get(key, 0) + 1
                    if family in FORWARD_FAMILIES:
                        answers.setdefault(key, []).append(a)
                    used = expressions.setdefault(key, set())
                    for _kind, element in nl.parse_attr_list(a.get(NFTA_RULE_EXPRESSIONS, b"")):
                        used.update(_expression_names(element))
                        target = _dynset_target(element)
                        if target is not None:
                            written.setdefault((family, table), set()).add(target)
        every_family = _NFGENMSG.pack(socket.AF_UNSPEC, 0, 0)
        if any(native.values()):
            for number, a in _answers(sock.dump(nft_message(NFT_MSG_GETCHAIN), every_family), NFT_MSG_NEWCHAIN):
                family, table = names.get(number, str(number)), nl.strict_name(a[NFTA_CHAIN_TABLE])
                if table in native.get(family, ()):
                    chains.append(_chain(family, a, rules, expressions))
        keyed = []
        for kind, message, table_attribute in (("set", NFT_MSG_GETSET, NFTA_SET_TABLE),
                                               ("object", NFT_MSG_GETOBJ, NFTA_OBJ_TABLE),
                                               ("flowtable", NFT_MSG_GETFLOWTABLE, NFTA_FLOWTABLE_TABLE)):
            for number, a in _answers(sock.dump(nft_message(message), every_family), message - 1):
                family, table = names.get(number, str(number)), nl.strict_name(a[table_attribute])
                if table in every.get(family, ()):
                    if kind == "set" and family in FORWARD_FAMILIES and table in native.get(family, ()) \
                            and (constant_anonymous(a) or static_named(a, written.get((family, table), ()))):
                        keyed.append((family, table, a))     # (its elements are read below)
                    elif kind == "object":
                        code = nl.be32(a[NFTA_OBJ_TYPE])
                        objects.append(NftObject(family, table, OBJECT_TYPES.get(code, f"object type {code}")))
                    else:
                        objects.append(NftObject(family, table, kind))
        sets: dict[tuple[str, str], dict[str, KeySet]] = {}
        for family, table, a in keyed:
            name = nl.strict_name(a[NFTA_SET_NAME])
            request = _NFGENMSG.pack(FAMILY_NUMBERS[family], 0, 0) + nl.attr(
                NFTA_SET_ELEM_LIST_TABLE, table.encode() + b"\0") + nl.attr(NFTA_SET_ELEM_LIST_SET, name.encode() + b"\0")
            read = key_set(a, [attrs for _, attrs in _answers(sock.dump(nft_message(NFT_MSG_GETSETELEM), request),
                                                                    NFT_MSG_NEWSETELEM)])
            if read is None:
                objects.append(NftObject(family, table, "set"))
            else:
                sets.setdefault((family, table), {})[name] = read
    chains.sort(key=lambda c: (c.family, c.table, c.name))
    return NftNative(tuple(chains), tuple(sorted(set(objects), key=lambda o: (o.family, o.table, o.kind))),
                     hooks_by_name=HOOKS_BY_NAME,
                     tables=tuple(sorted(f"{family} {table}" for family, names_ in every.items() for table in names_)),
                     forward=forward_rulesets(chains, answers, sets))


def _answers(replies, kind: int):
    """The family and the attributes of each answer of `kind`."""
    for reply in replies:
        if reply.type & 0xFF == kind:
            yield reply.payload[0], nl.parse_attrs(reply.payload, _NFGENMSG.size)


def _expression_names(element: bytes) -> set[str]:
    """An expression's name and those it holds: x_tables' matches and targets
    as "match NAME" / "target NAME", and the expressions a dynset attaches
    to the elements it adds (a connlimit there tracks connections too)."""
    e = nl.parse_attrs(element)
    name = nl.strict_name(e.get(NFTA_EXPR_NAME, b""))
    data = nl.parse_attrs(e.get(NFTA_EXPR_DATA, b""))
    if name in ("match", "target"):
        return {f"{name} {nl.strict_name(data.get(NFTA_MATCH_NAME if name == 'match' else NFTA_TARGET_NAME, b''))}"}
    names = {name}
    if name == "dynset":
        if NFTA_DYNSET_EXPR in data:
            names |= _expression_names(data[NFTA_DYNSET_EXPR])
        for _kind, nested in nl.parse_attr_list(data.get(NFTA_DYNSET_EXPRESSIONS, b"")):
            names |= _expression_names(nested)
    return names


def _dynset_target(element: bytes) -> str | None:
    """The set a dynset expression writes from the packet path (`add
    @name { ip saddr }`, `update @name ...`), by name; None for any other
    expression."""
    e = nl.parse_attrs(element)
    if nl.strict_name(e.get(NFTA_EXPR_NAME, b"")) != "dynset":
        return None
    return nl.strict_name(nl.parse_attrs(e.get(NFTA_EXPR_DATA, b"")).get(NFTA_DYNSET_SET_NAME, b""))


def _chain(family: str, a: dict[int, bytes], rules: dict, expressions: dict) -> NftChain:
    table, name = nl.strict_name(a[NFTA_CHAIN_TABLE]), nl.strict_name(a[NFTA_CHAIN_NAME])
    hook, devices, prefixes, policy, priority = "", [], [], "", 0
    if NFTA_CHAIN_HOOK in a:
        hook_attrs = nl.parse_attrs(a[NFTA_CHAIN_HOOK])
        number = nl.be32(hook_attrs[NFTA_HOOK_HOOKNUM])
        priority = struct.unpack("!i", hook_attrs.get(NFTA_HOOK_PRIORITY, b"\0\0\0\0"))[0]
        names = HOOK_NAMES[family]
        hook = names[number] if number < len(names) else f"hook {number}"
        bound = [(NFTA_DEVICE_NAME, hook_attrs[NFTA_HOOK_DEV])] if NFTA_HOOK_DEV in hook_attrs else []
        for kind, value in bound + nl.parse_attr_list(hook_attrs.get(NFTA_HOOK_DEVS, b"")):
            if kind == NFTA_DEVICE_PREFIX or (kind == NFTA_DEVICE_NAME and not value.endswith(b"\0")):
                # (6.16 sent a wildcard `eth*` as a name without its NUL;
                # NFTA_DEVICE_PREFIX came with 6.17)
                prefixes.append(nl.strict_name(value))
            elif kind == NFTA_DEVICE_NAME:
                devices.append(nl.strict_name(value))
            else:
                raise NativeUnreadable(f"chain {family} {table} {name}: a device attribute ({kind}) not known here")
        code = nl.be32(a[NFTA_CHAIN_POLICY]) if NFTA_CHAIN_POLICY in a else NF_ACCEPT
        policy = {NF_ACCEPT: "accept", NF_DROP: "drop"}.get(code, f"verdict {code}")
    key = (family, table, name)
    return NftChain(family=family, table=table, name=name, hook=hook,
                    kind=nl.cstr(a.get(NFTA_CHAIN_TYPE, b"")) if hook else "", policy=policy,
                    devices=tuple(sorted(set(devices))), device_prefixes=tuple(sorted(set(prefixes))),
                    rules=rules.get(key, 0), expressions=tuple(sorted(expressions.get(key, ()))), priority=priority)
