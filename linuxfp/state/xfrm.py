"""IPsec policy presence (NETLINK_XFRM): ip_forward() checks xfrm policies
(xfrm4_policy_check, xfrm4_route_forward), which may drop or transform a
forwarded packet, so the router fast path needs to know whether any exist."""

from __future__ import annotations

import errno
import struct

from . import netlink as nl
from .model import XfrmState

NETLINK_XFRM = 6
XFRM_MSG_GETSPDINFO = 37
XFRM_MSG_GETDEFAULT = 40
XFRMA_SPD_INFO = 1
XFRM_USERPOLICY_BLOCK = 1
_SPDINFO = struct.Struct("=6I")   # struct xfrmu_spdinfo


def read_xfrm() -> XfrmState:
    """Policy counts and default actions of this namespace; `available=False`
    when the kernel has no xfrm netlink (then no policy can exist either)."""
    try:
        sock = nl.NetlinkSocket(NETLINK_XFRM)
    except OSError:
        return XfrmState(available=False)
    with sock:
        try:
            replies = sock.request(XFRM_MSG_GETSPDINFO, struct.pack("=I", 0), dump=False)
        except nl.NetlinkError:
            # xfrm exists (the socket opened) but would not say: unsure, so
            # the fast path must assume policies
            return XfrmState(available=True, unreadable=True)
        counts = (0, 0, 0)
        for reply in replies:
            attrs = nl.parse_attrs(reply.payload, 4)
            if XFRMA_SPD_INFO in attrs:
                incnt, outcnt, fwdcnt, _, _, _ = _SPDINFO.unpack_from(attrs[XFRMA_SPD_INFO])
                counts = (incnt, outcnt, fwdcnt)
        blocks = False
        try:
            for reply in sock.request(XFRM_MSG_GETDEFAULT, bytes(4), dump=False):
                blocks = XFRM_USERPOLICY_BLOCK in reply.payload[:3]
        except nl.NetlinkError as e:
            # kernels before 5.16 have no default policies (EOPNOTSUPP/EINVAL):
            # accept; any other refusal: unsure, so assume a blocking default
            blocks = e.errno not in (errno.EOPNOTSUPP, errno.EINVAL)
    return XfrmState(available=True, policies_in=counts[0], policies_out=counts[1],
                     policies_fwd=counts[2], default_blocks=blocks)
