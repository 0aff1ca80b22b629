"""Which devices carry tcx programs of other tools (BPF-link TC attachments,
kernel 6.6 on): a redirect of ours would skip them — out of the ingress path
they run in, or past the egress path (an XDP redirect, bpf_redirect_peer
into a veth's peer). No netlink event announces a tcx attachment: they are
read with the snapshot, for each new device, and by the 1 s poll
(`refresh_polled`). LinuxFP's own programs are named lfp_* (the entry
functions of its pipelines, the bench ladder)."""
from __future__ import annotations

import errno

from linuxfp import datapath as dp

OWN_PREFIX = "lfp_"
_MAX_REMEMBERED = 4096

_names: dict[int, str] = {}      # program id -> its name (an id is not reused while its program lives)


def _is_ours(prog_id: int) -> bool:
    name = _names.get(prog_id)
    if name is None:
        try:
            prog = dp.Program.from_id(prog_id)
            try:
                name = dp.prog_info(prog.fd)["name"]
            finally:
                prog.close()
        except (dp.BpfError, OSError):
            return False     # gone meanwhile, or unreadable: nothing we can vouch for
        if len(_names) >= _MAX_REMEMBERED:
            _names.clear()
        _names[prog_id] = name
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
        found.append(any(not _is_ours(prog_id) for prog_id in attached))
    return found[0], found[1]
