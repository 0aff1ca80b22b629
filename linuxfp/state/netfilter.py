"""Does any netfilter ruleset exist that could touch forwarded IPv4 packets?

Two independent rule engines can be loaded in one namespace:

* nf_tables (the `nft` tool and iptables-nft, Debian's default `iptables`):
  any table at all counts, queried with an NFT_MSG_GETTABLE dump over
  NETLINK_NETFILTER. Changes are announced on NFNLGRP_NFTABLES.
* legacy x_tables (iptables-legacy): counted when an existing table holds a
  rule or a user chain, or a built-in chain's policy is not ACCEPT; a legacy
  `nat` table counts even when empty because it pulls in connection tracking
  (and with it defragmentation). Read with the same getsockopt calls
  iptables-legacy-save uses, but only for tables listed in
  /proc/<tid>/net/ip_tables_names: asking for any other table would make the
  kernel instantiate it. Legacy changes produce no netlink event at all.

The answer errs on the side of "active": the fast path then leaves packets
to the kernel.

Where IPv4 iptables tables exist, their rules are read too, so a filter node
can evaluate them: iptables-nft's decoded straight from nf_tables
(nft_rules.py) where the decoder knows every rule, else with the save tools
(iptables.py); re-read only when a backend's fingerprint changed (the
nf_tables generation id; the legacy tables' blobs). Native nf_tables tables
(the `nft` tool's) are read as far as where they hook in, and every table's
objects, sets and flowtables (nft_native.py), with the same fingerprint.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import errno
import hashlib
import os
import socket
import struct
import subprocess
import threading
from dataclasses import dataclass

from . import netlink as nl
from .iptables import BUILTIN_CHAINS, Ruleset, read_ruleset
from .nft_native import FAMILY_NUMBERS, HOOKS_BY_NAME, read_native_tables
from .nft_rules import nft_message, read_native
from .xt_blob import GETINFO, decode_tables
from .xt_extensions import Undecodable
from .ipset import LIST_PENDING, combine_list, read_ipsets
from .model import IpSet, NetfilterState, NftNative
from .decode import NFNL_SUBSYS_NFTABLES, NFT_MSG_NEWGEN, NFTA_GEN_ID, decode_nft_event  # noqa: F401 (NEWGEN's layout: decode's)

NFT_MSG_NEWTABLE = 0
NFT_MSG_GETTABLE = 1
NFT_MSG_GETGEN = 16
NFTA_TABLE_NAME = 1
NFTA_TABLE_FLAGS = 2
_NFGENMSG = struct.Struct("=BBH")

NFPROTO_NAMES = {0: "unspec", **{number: name for name, number in FAMILY_NUMBERS.items()}}

IPT_SO_GET_INFO = 64
IPT_SO_GET_ENTRIES = 65
XT_TABLE_MAXNAMELEN = 32
NF_INET_NUMHOOKS = 5
_IPT_GETINFO = GETINFO         # struct ipt_getinfo (xt_blob.py decodes it; tests/test_xt_layout.py checks it)
_IPT_GET_ENTRIES_HEADER = 40  # offsetof(struct ipt_get_entries, entrytable)
_XT_ENTRY_TARGET_SIZE = 32  # sizeof(struct xt_entry_target)
_VERDICT_ACCEPT = -1 - 1  # standard target verdict for NF_ACCEPT (-NF_ACCEPT - 1)


def _thread_net_path(name: str) -> str:
    # /proc/net follows the *process*; a test or daemon thread that setns()ed
    # must look at its own view.
    return f"/proc/thread-self/net/{name}"


# --- nf_tables -------------------------------------------------------------

def nft_tables() -> tuple[str, ...] | None:
    """"family name" of every nf_tables table; None when nf_tables is absent."""
    found = _nft_table_dump()
    return None if found is None else found[0]


NFT_TABLE_F_DORMANT = 0x1


def _absent(exc: OSError) -> bool:
    """Whether a request to nf_tables failed because the kernel has none:
    nfnetlink's answer for a subsystem it does not have, or no
    NETLINK_NETFILTER socket at all."""
    if isinstance(exc, nl.NetlinkError):
        return exc.errno in (errno.EOPNOTSUPP, errno.ENOENT, errno.EPROTONOSUPPORT)
    return exc.errno in (errno.EPROTONOSUPPORT, errno.EAFNOSUPPORT)


def _nft_table_dump() -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """Every nf_tables table and the dormant ones among them (whose chains
    the kernel has not hooked in), as "family name"; None when nf_tables is
    absent."""
    try:
        with nl.query_socket(nl.NETLINK_NETFILTER) as sock:
            replies = sock.dump(nft_message(NFT_MSG_GETTABLE), _NFGENMSG.pack(socket.AF_UNSPEC, 0, 0))
    except OSError as exc:      # NetlinkError included
        if _absent(exc):
            return None
        raise
    names, dormant = [], []
    for reply in replies:
        if reply.type & 0xFF != NFT_MSG_NEWTABLE:
            continue
        family = reply.payload[0]
        a = nl.parse_attrs(reply.payload, _NFGENMSG.size)
        name = f"{NFPROTO_NAMES.get(family, str(family))} {nl.cstr(a.get(NFTA_TABLE_NAME, b'?'))}"
        names.append(name)
        flags = a.get(NFTA_TABLE_FLAGS)
        if flags is not None and len(flags) >= 4 and struct.unpack("!I", flags[:4])[0] & NFT_TABLE_F_DORMANT:
            dormant.append(name)
    return tuple(sorted(names)), tuple(sorted(dormant))


def nft_generation() -> int | None:
    """The nf_tables ruleset generation id: it changes with every commit."""
    try:
        return _read_generation()
    except OSError:         # NetlinkError included
        return None


def _read_generation() -> int | None:
    """nft_generation(), its failure raised (OSError); None: no generation
    in the answer."""
    with nl.query_socket(nl.NETLINK_NETFILTER) as sock:
        replies = sock.request(nft_message(NFT_MSG_GETGEN), _NFGENMSG.pack(socket.AF_UNSPEC, 0, 0), dump=False)
    # (the answer is the NFT_MSG_NEWGEN a commit announces: one decoder)
    for reply in replies:
        event = decode_nft_event(reply)
        if event is not None and event.generation is not None:
            return event.generation
    return None


# nfnetlink's batch (linux/netfilter/nfnetlink.h)
NFNL_MSG_BATCH_BEGIN, NFNL_MSG_BATCH_END = 0x10, 0x11
NFNL_BATCH_GENID = 1
_ERESTART = 85          # the kernel's ERESTART, as a netlink answer carries it


# per namespace (its cookie: inodes are recycled, and generations start
# again in every namespace), the last nf_tables generation known settled:
# announced (a commit sends NFT_MSG_NEWGEN at its very end, once all of it
# applied), or passed by a barrier (a read under it again needs none)
_settled: dict[int, int] = {}


def _namespace() -> int:
    return nl.netns_cookie()


# per namespace (its cookie), why its last read could not be settled: what
# that read holds may be half a commit, not to be taken in under any
# generation (the caller keeps passing and reads again)
_unsettled: dict[int, str] = {}


def unsettled_reason() -> str | None:
    """Why the calling thread's namespace's last settled_nft_generation
    could not settle a commit that nf_tables counts; None: it did, or there
    was no nf_tables to settle."""
    return _unsettled.get(_namespace())


def generation_announced(generation: int) -> None:
    """A commit of the calling thread's namespace announced `generation`
    (NFT_MSG_NEWGEN, received by a listener): it is over."""
    _settled[_namespace()] = generation


def settled_nft_generation() -> int | None:
    """The nf_tables generation of the last commit that has *finished*. A
    commit moves the generation first, then applies what its rules do not
    carry themselves (chain policies, a table woken or put to sleep, set,
    object and flowtable updates) and only then lets the next batch in: a
    read that begins between the two reads the new generation and some of
    the old state. An empty batch naming the generation is the barrier: the
    kernel takes the commit mutex for it (nf_tables_valid_genid), so it
    returns once any commit in progress is over, and refuses it (ERESTART)
    when another commit came since; it changes nothing (an empty batch
    commits nothing: no generation moves, nothing is announced). None when
    it cannot be settled (commits keep coming, or nf_tables is not there).
    A generation whose commit announced itself to a listener of this
    process (generation_announced) is settled already: the barrier would
    wait for nothing but the committing process's socket close (which
    flushes nf_tables' destroy work, an RCU grace period after a deletion,
    under the commit mutex); so is one a barrier passed before (a poll of
    a quiet namespace takes no commit mutex)."""
    namespace = _namespace()
    why = "commits kept coming"
    for _ in range(5):
        try:
            generation = _read_generation()
        except OSError as exc:
            # (no nf_tables: nothing is counted, nothing to settle)
            why = "" if _absent(exc) else f"the nf_tables generation cannot be read: {exc}"
            break
        if generation is None:
            why = "the nf_tables generation cannot be read: no generation in the answer"
            break
        if _settled.get(namespace) == generation:
            _unsettled.pop(namespace, None)
            return generation
        try:
            if _empty_batch(generation):
                _settled[namespace] = generation
                _unsettled.pop(namespace, None)
                return generation
        except OSError as exc:
            why = f"nf_tables refused the barrier: {exc}"
            break
    if why:
        _unsettled[namespace] = why
    else:
        _unsettled.pop(namespace, None)
    return None


def _empty_batch(generation: int) -> bool:
    """Send nf_tables an empty batch for `generation`; False: another
    commit came first (ERESTART). nfnetlink handles a batch inside the
    sending call, so its answer, if any, is queued when send returns."""
    header = _NFGENMSG.pack(socket.AF_UNSPEC, 0, socket.htons(NFNL_SUBSYS_NFTABLES))
    begin = header + nl.attr(NFNL_BATCH_GENID, struct.pack(">I", generation))
    batch = (nl.NLMSGHDR.pack(nl.NLMSGHDR.size + len(begin), NFNL_MSG_BATCH_BEGIN, nl.NLM_F_REQUEST, 1, 0) + begin
             + nl.NLMSGHDR.pack(nl.NLMSGHDR.size + len(header), NFNL_MSG_BATCH_END, nl.NLM_F_REQUEST, 2, 0)
             + header)
    # (the controller's kept query socket: closing a netfilter socket waits
    # for nf_tables' destroy work, an RCU grace period after a deletion)
    with nl.query_socket(nl.NETLINK_NETFILTER) as sock:
        sock.sock.send(batch)
        try:
            answer = sock.sock.recv(4096, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return True
    for message in nl.split_messages(answer):
        if message.type == nl.NLMSG_ERROR and len(message.payload) >= 4:
            code = -nl.s32(message.payload[:4])
            if code == _ERESTART:
                return False
            if code:
                raise OSError(code, f"nf_tables refused an empty batch: {os.strerror(code)}")
    return True


# --- legacy x_tables ----------------------------------------------------------

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.getsockopt.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                             ctypes.POINTER(ctypes.c_uint32)]


@dataclass(frozen=True)
class XtFamily:
    """One family's x_tables as its getsockopt calls see them: the socket
    level, the file listing its tables, and where struct ipt_entry /
    ip6t_entry keep the offsets and counters (tests/test_xt_layout.py
    checks them against the kernel's BTF)."""

    name: str               # "ip" or "ip6", as Ruleset.family
    level: int              # SOL_IP / SOL_IPV6
    socket_family: int
    names_file: str         # /proc/net/..._tables_names
    target_offset: int      # offsetof(struct ipt_entry, target_offset)
    next_offset: int        # offsetof(..., next_offset)
    counters: int           # offsetof(..., counters): 16 bytes


IPV4 = XtFamily("ip", socket.IPPROTO_IP, socket.AF_INET, "ip_tables_names", 88, 90, 96)
IPV6 = XtFamily("ip6", socket.IPPROTO_IPV6, socket.AF_INET6, "ip6_tables_names", 140, 142, 152)
_IPT_ENTRY_TARGET_OFFSET = IPV4.target_offset   # (legacy_table_findings reads IPv4 tables)


def _getsockopt(fd: int, optname: int, buf: ctypes.Array, level: int = socket.IPPROTO_IP) -> None:
    size = ctypes.c_uint32(len(buf))
    if _libc.getsockopt(fd, level, optname, buf, ctypes.byref(size)) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def xt_socket(family: XtFamily = IPV4) -> socket.socket:
    """A socket to ask (or tell) the family's x_tables."""
    return socket.socket(family.socket_family, socket.SOCK_RAW, socket.IPPROTO_RAW)


def legacy_table_names(family_file: str = "ip_tables_names") -> tuple[str, ...]:
    """The legacy x_tables of one family that exist in this namespace
    (ip_tables_names, ip6_tables_names, arp_tables_names)."""
    try:
        with open(_thread_net_path(family_file)) as f:
            return tuple(sorted(line.strip() for line in f if line.strip()))
    except FileNotFoundError:
        return ()  # that family's x_tables not built in: no legacy rules can exist


def legacy_table_findings(table: str) -> str | None:
    """Why an existing legacy table affects packets, or None when it is a
    no-op (only built-in chains, all with policy ACCEPT)."""
    if table == "nat":
        return "nat table (enables connection tracking)"
    sock = xt_socket()
    try:
        info = ctypes.create_string_buffer(_IPT_GETINFO.pack(table.encode(), 0, *[0] * 10, 0, 0), _IPT_GETINFO.size)
        _getsockopt(sock.fileno(), IPT_SO_GET_INFO, info)
        fields = _IPT_GETINFO.unpack(info.raw)
        valid_hooks = fields[1]
        underflow = fields[2 + NF_INET_NUMHOOKS : 2 + 2 * NF_INET_NUMHOOKS]
        num_entries, size = fields[-2], fields[-1]
        builtin = valid_hooks.bit_count()
        # Built-in chains: one policy entry each, plus the trailing ERROR entry.
        if num_entries > builtin + 1:
            return f"{table}: {num_entries - builtin - 1} rule/chain entries"
        entries = ctypes.create_string_buffer(_IPT_GET_ENTRIES_HEADER + size)
        struct.pack_into(f"={XT_TABLE_MAXNAMELEN}sI", entries, 0, table.encode(), size)
        _getsockopt(sock.fileno(), IPT_SO_GET_ENTRIES, entries)
        blob = entries.raw[_IPT_GET_ENTRIES_HEADER:]
        for hook in range(NF_INET_NUMHOOKS):
            if not valid_hooks & (1 << hook):
                continue
            entry = underflow[hook]
            target_offset = struct.unpack_from("=H", blob, entry + _IPT_ENTRY_TARGET_OFFSET)[0]
            verdict = struct.unpack_from("=i", blob, entry + target_offset + _XT_ENTRY_TARGET_SIZE)[0]
            if verdict != _VERDICT_ACCEPT:
                return f"{table}: built-in chain policy is not ACCEPT (hook {hook})"
        return None
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None  # table went away between listing and query
        return f"{table}: unreadable ({exc.strerror})"
    finally:
        sock.close()


def _legacy_blob(sock: socket.socket, table: str, family: XtFamily = IPV4) -> bytes:
    """GET_INFO's answer, then the table's entries (ipt_getinfo and
    ip6t_getinfo have one layout, as do the GET_ENTRIES headers)."""
    for _ in range(3):
        info = ctypes.create_string_buffer(_IPT_GETINFO.pack(table.encode(), 0, *[0] * 10, 0, 0),
                                           _IPT_GETINFO.size)
        _getsockopt(sock.fileno(), IPT_SO_GET_INFO, info, family.level)
        size = _IPT_GETINFO.unpack(info.raw)[-1]
        entries = ctypes.create_string_buffer(_IPT_GET_ENTRIES_HEADER + size)
        struct.pack_into(f"={XT_TABLE_MAXNAMELEN}sI", entries, 0, table.encode(), size)
        _getsockopt(sock.fileno(), IPT_SO_GET_ENTRIES, entries, family.level)
        # GET_ENTRIES checks only the size: a replace of the same size between
        # the two calls would pair these entries with another table's hooks
        again = ctypes.create_string_buffer(info.raw, _IPT_GETINFO.size)
        _getsockopt(sock.fileno(), IPT_SO_GET_INFO, again, family.level)
        if again.raw == info.raw:
            return info.raw + entries.raw[_IPT_GET_ENTRIES_HEADER:]
    raise OSError(errno.EAGAIN, f"{table}: replaced while it was read")


def read_legacy_native(family: str = "ip") -> Ruleset:
    """iptables-legacy's (or ip6tables-legacy's) tables decoded from their
    blobs (xt_blob.py), in the order the tool prints them (the names file's);
    raises Undecodable, saying why, where the tool must read them."""
    xt_family = IPV4 if family == "ip" else IPV6
    try:
        with open(_thread_net_path(xt_family.names_file)) as f:
            names = tuple(line.strip() for line in f if line.strip())
    except FileNotFoundError:
        names = ()
    key = (nl.netns_cookie(), family)
    with _cache_lock:
        known = _legacy_decoded.get(key, {})
    used: dict = {}
    ruleset = decode_tables(names, legacy_blobs(names, xt_family), known, used, family)
    with _cache_lock:
        _legacy_decoded[key] = used
    return ruleset


# (netns cookie, family) -> what the last decode of its legacy tables
# decoded, by content
_legacy_decoded: dict[tuple[int, str], dict] = {}


def legacy_blobs(tables: tuple[str, ...], family: XtFamily = IPV4) -> dict[str, bytes | OSError]:
    """Each table's blob (_legacy_blob), or why it could not be read."""
    sock = xt_socket(family)
    try:
        blobs: dict[str, bytes | OSError] = {}
        for table in tables:
            try:
                blobs[table] = _legacy_blob(sock, table, family)
            except OSError as exc:
                blobs[table] = exc
        return blobs
    finally:
        sock.close()


def legacy_fingerprint(tables: tuple[str, ...], family: XtFamily = IPV4) -> bytes:
    """A digest of every legacy table's rules, counters left out (traffic
    must not look like a rule change)."""
    return fingerprint_of_blobs(tables, legacy_blobs(tables, family), family)


def fingerprint_of_blobs(tables: tuple[str, ...], blobs: dict[str, bytes | OSError],
                         family: XtFamily = IPV4) -> bytes:
    """legacy_fingerprint over blobs already read (xt_counters.py reads them
    once for both the comparison and the entries)."""
    digest = hashlib.blake2b(digest_size=16)
    for table in tables:
        digest.update(table.encode() + b"\0")
        blob = blobs.get(table)
        if isinstance(blob, bytes):
            digest.update(_legacy_rules_only(blob, family))
        else:
            digest.update(f"error {getattr(blob, 'errno', None)}".encode())
    return digest.digest()


def _legacy_rules_only(blob: bytes, family: XtFamily = IPV4) -> bytes:
    """The blob with every entry's packet/byte counters zeroed: traffic must
    not look like a rule change."""
    info, entries = blob[:_IPT_GETINFO.size], bytearray(blob[_IPT_GETINFO.size:])
    offset = 0
    while offset + family.next_offset + 2 <= len(entries):
        entries[offset + family.counters:offset + family.counters + 16] = bytes(16)
        step = struct.unpack_from("=H", entries, offset + family.next_offset)[0]
        if step == 0:
            break
        offset += step
    return info + bytes(entries)


# (netns cookie, backend, family) -> (fingerprint, ruleset or error text)
_read_cache: dict[tuple[int, str, str], tuple[object, Ruleset | str]] = {}
_cache_lock = threading.Lock()


def _cached_ruleset(backend: str, fingerprint: object, family: str = "ip") -> Ruleset | str:
    """The backend's ruleset of `family`, re-read only when its fingerprint
    changed; a text when it cannot be read."""
    key = (nl.netns_cookie(), backend, family)       # inodes are recycled, cookies never
    with _cache_lock:
        known = _read_cache.get(key)
    if known is not None and fingerprint is not None and known[0] == fingerprint:
        return known[1]
    try:
        # nf_tables' rules straight from the kernel where every one of them
        # is known to decode as the tool prints it; the tool reads the rest
        try:
            # (nf_tables' fingerprint is its generation, read before the dump)
            result: Ruleset | str = (read_native(family, fingerprint if isinstance(fingerprint, int) else None)
                                     if backend == "nft" else read_legacy_native(family))
        except Undecodable as why:
            result = dataclasses.replace(read_ruleset(backend, family), undecoded=str(why))
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        result = str(exc)
    with _cache_lock:
        _read_cache[key] = (fingerprint, result)
    return result


def native_table(entry: str) -> bool:
    """Whether an nf_tables table ("family name") is the `nft` tool's, not
    one of iptables-nft's (an ip or ip6 table with an x_tables name: if nft
    made it, iptables-nft-save calls it incompatible)."""
    family, _, name = entry.partition(" ")
    return family not in ("ip", "ip6") or name not in BUILTIN_CHAINS


def _cached_native(fingerprint: object, tables: tuple[str, ...]) -> NftNative | str:
    """Where the native tables hook in, and every table's objects, re-read
    when the nf_tables generation changed; a text when they cannot be read
    (not remembered: the next read tries again)."""
    key = (nl.netns_cookie(), "native", "")
    with _cache_lock:
        known = _read_cache.get(key)
    if known is not None and fingerprint is not None and known[0] == (fingerprint, tables):
        return known[1]
    try:
        result = read_native_tables(tables, fingerprint if isinstance(fingerprint, int) else None)
    except (OSError, ValueError) as exc:     # NativeUnreadable included
        return f"native nf_tables tables: {exc}"
    with _cache_lock:
        _read_cache[key] = ((fingerprint, tables), result)
    return result


def read_netfilter(fresh_sets: bool = True) -> NetfilterState:
    """`fresh_sets`: read every ipset the rules match again; False reads only
    sets not read before in this namespace (an nf_tables commit changes no
    set: ipset changes are announced by the filter node's watch, after which
    the caller asks for fresh sets)."""
    tables: list[str] = []
    details: list[str] = []
    # one fingerprint for every nf_tables read below, the table list
    # included: read before them all, it is never newer than what they read;
    # settled, what they read holds all of the commit that made it
    generation = settled_nft_generation()
    dump = _nft_table_dump()
    nft, dormant = dump if dump is not None else (None, ())
    if nft:
        tables.extend(f"nft:{t}" for t in nft)
        details.append(f"nf_tables tables: {', '.join(nft)}")
    legacy_names = legacy_table_names()
    for table in legacy_names:
        finding = legacy_table_findings(table)
        if finding is not None:
            tables.append(f"legacy:{table}")
            details.append(f"iptables-legacy {finding}")
    if nft is None:
        details.append("nf_tables unavailable")
    active = bool(tables)
    if not active:
        details.insert(0, "no netfilter ruleset")
    rulesets, errors = [], []
    if any(t.startswith("ip ") for t in nft or ()):
        _collect(_cached_ruleset("nft", generation), rulesets, errors)
    if any(t.startswith("legacy:") for t in tables):
        _collect(_cached_ruleset("legacy", legacy_fingerprint(legacy_names)), rulesets, errors)
    # ip6tables' rules too: what of them touches forwarded IPv6 (scope.py)
    rulesets6, errors6 = [], []
    if any(t.startswith("ip6 ") for t in nft or ()):
        _collect(_cached_ruleset("nft", generation, "ip6"), rulesets6, errors6)
    legacy6 = legacy_table_names(IPV6.names_file)
    if legacy6:
        _collect(_cached_ruleset("legacy", legacy_fingerprint(legacy6, IPV6), "ip6"), rulesets6, errors6)
    native, native_error = NftNative(hooks_by_name=HOOKS_BY_NAME), ""
    if nft:
        read = _cached_native(generation, nft)
        native, native_error = (read, "") if isinstance(read, NftNative) else (NftNative(), read)
    return NetfilterState(active=active, tables=tuple(tables), detail="; ".join(details),
                          native=native, native_error=native_error, dormant=dormant,
                          rulesets=tuple(rulesets), errors=tuple(errors),
                          rulesets6=tuple(rulesets6), errors6=tuple(errors6),
                          legacy_ip6_tables=legacy6,
                          legacy_arp_tables=legacy_table_names("arp_tables_names"),
                          ipsets=_matched_sets(rulesets + rulesets6, fresh_sets))


# --- ipsets -------------------------------------------------------------------

_set_cache: dict[int, dict[str, IpSet]] = {}


# `-m set` options that read a member's packet and byte counters: the
# kernel bumps them on every match, the fast path does not.
COUNTER_OPTIONS = frozenset({"--packets-eq", "--packets-lt", "--packets-gt", "--bytes-eq", "--bytes-lt",
                             "--bytes-gt"})


def _matched_sets(rulesets, fresh: bool) -> tuple[IpSet, ...]:
    """The sets `-m set` matches name, each marked unsupported where the
    packet path changes it, which no system call announces: a SET target
    adds or deletes members (of the set, or of the sets a list:set it names
    holds), or a rule reads its members' counters (every match in the
    kernel bumps them)."""
    matched, targeted, changed = set(), {}, {}
    for ruleset in rulesets:
        for table in ruleset.tables:
            for chain in table.chains:
                for rule in chain.rules:
                    where = f"{ruleset.tool} {table.name} {rule.chain} #{rule.position}"
                    names = [m.values[0] for m in rule.matches
                             if m.module == "set" and m.option == "--match-set" and m.values]
                    matched.update(names)
                    if any(m.module == "set" and m.option in COUNTER_OPTIONS for m in rule.matches):
                        for name in names:
                            changed.setdefault(name, f"{where} matches its members' counters")
                    if rule.target == "SET":
                        options = rule.target_options
                        for i, word in enumerate(options[:-1]):
                            if word in ("--add-set", "--del-set", "--map-set"):
                                targeted.setdefault(options[i + 1], where)
    if not matched:
        return ()
    key = nl.netns_cookie()
    with _cache_lock:
        known = dict(_set_cache.get(key, {}))
    # The sets rules name, and the members of the lists among them (which are
    # never lists themselves: two rounds at most), read afresh or from the cache.
    read: set[str] = set()
    while True:
        wanted = matched | set(targeted) | {member for name in matched if name in known
                                            and known[name].kind == "list:set" for member in known[name].members}
        todo = sorted((wanted if fresh else wanted - set(known)) - read)
        if not todo:
            break
        try:
            known.update((s.name, s) for s in read_ipsets(todo))
        except OSError as exc:
            known.update((name, IpSet(name, unsupported=f"ipsets cannot be read ({exc})")) for name in todo)
        read.update(todo)
    # Only sets rules name now (and their lists' members): one named again later is read afresh.
    known = {name: known[name] for name in wanted}
    with _cache_lock:
        _set_cache[key] = known
    # What a SET target reaches: its set, and through a list:set its members
    # (a set that cannot be read could hold any of them).
    todo = list(targeted.items())
    while todo:
        name, where = todo.pop()
        if name in changed:
            continue
        changed[name] = f"a SET target changes it from the packet path ({where})"
        target = known.get(name)
        if target is None or not target.kind:
            todo += [(other, where) for other in matched if other not in changed]
        else:
            todo += [(member, where) for member in target.members]
    def as_matched(name: str) -> IpSet:
        ipset = known[name]
        # (a list not combined yet is marked too: its own counters count, list_set_ktest)
        if name in changed and (ipset.unsupported is None or ipset.unsupported.endswith(LIST_PENDING)):
            ipset = IpSet(name, ipset.kind, unsupported=f"ipset {name}: {changed[name]}", members=ipset.members)
        return ipset

    out = []
    for name in sorted(matched):
        ipset = as_matched(name)
        if ipset.kind == "list:set":
            ipset = combine_list(ipset, {member: as_matched(member) for member in ipset.members})
        out.append(ipset)
    return tuple(out)


def _collect(result: Ruleset | str, rulesets: list, errors: list) -> None:
    if isinstance(result, str):
        errors.append(result)
    else:
        rulesets.append(result)
