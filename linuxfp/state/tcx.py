"""Which devices carry tcx programs of other tools (BPF-link TC attachments,
kernel 6.6 on): a redirect of ours would skip them — out of the ingress path
they run in, or past the egress path (an XDP redirect, bpf_redirect_peer
into a veth's peer). No netlink event announces a tcx attachment: they are
read with the snapshot, for each new device, and by the 1 s poll
(`refresh_polled`). A program is LinuxFP's when it uses one of the
namespace's lease maps (`own_lease_maps`: every pipeline checks the lease,
the bench ladder is bound to it), whatever it is called: a program of
another tool named lfp_* is theirs. At an egress every program is another
tool's (LinuxFP attaches at ingress only). Where nothing said which maps
are the lease's (a process that found no readable pins), by the name lfp_*."""
from __future__ import annotations

import errno

from linuxfp import datapath as dp

OWN_PREFIX = "lfp_"
_MAX_REMEMBERED = 4096

# program id -> (its name, the maps it uses): an id is not reused while its program lives
_seen: dict[int, tuple[str, frozenset[int]]] = {}
_lease_maps: frozenset[int] = frozenset()


def own_lease_maps(map_ids: frozenset[int]) -> None:
    """The ids of this namespace's lease maps (the current one and those of
    other versions' pins): a program using one is LinuxFP's. Empty: by name."""
    global _lease_maps
    _lease_maps = frozenset(map_ids)


def own_lease_ids() -> frozenset[int]:
    return _lease_maps


def _is_ours(prog_id: int) -> bool:
    seen = _seen.get(prog_id)
    if seen is None:
        try:
            prog = dp.Program.from_id(prog_id)
            try:
                seen = (dp.prog_info(prog.fd)["name"], frozenset(dp.prog_map_ids(prog.fd)))
            finally:
                prog.close()
        except (dp.BpfError, OSError):
            return False     # gone meanwhile, or unreadable: nothing we can vouch for
        if len(_seen) >= _MAX_REMEMBERED:
            _seen.clear()
        _seen[prog_id] = seen
    name, maps = seen
    if _lease_maps:
        return bool(maps & _lease_maps)
    return name.startswith(OWN_PREFIX)


def others_attached(ifindex: int) -> tuple[bool, bool]:
    """(ingress, egress): whether tcx programs not LinuxFP's run there."""
    found = []
    for direction in ("ingress", "egress"):
        try:
            attached = dp.tcx_attached(ifindex, direction)
        except dp.BpfError as e:
            # no tcx in this kernel, or the device is gone (or, before tcx
            # was released, has no entry): none; anything else (more
            # programs than the query holds): assume theirs
            found.append(e.errno not in (errno.EINVAL, errno.ENODEV, errno.ENOENT))
            continue
        # LinuxFP attaches at ingress only: whatever runs at egress is another's
        found.append(any(direction == "egress" or not _is_ours(prog_id) for prog_id in attached))
    return found[0], found[1]
