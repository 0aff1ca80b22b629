"""The x_tables structures Python reads and writes with getsockopt and
setsockopt (linuxfp/state/netfilter.py, xt_counters.py), checked against
the running kernel's BTF: one source for each layout."""
from __future__ import annotations

import pytest

from linuxfp.datapath.btf import BTF_KIND_STRUCT, lib, type_shape
from linuxfp.state.netfilter import _IPT_GET_ENTRIES_HEADER, _IPT_GETINFO, IPV4, IPV6, XT_TABLE_MAXNAMELEN
from linuxfp.state.xt_counters import _COUNTER, _COUNTERS_INFO, _ERROR_NAME_OFFSET, _TARGET_NAME


@pytest.fixture(scope="module")
def kernel():
    library = lib()
    btf = library.btf__load_vmlinux_btf()
    if not btf:
        pytest.fail("the kernel has no BTF (/sys/kernel/btf/vmlinux)")

    def shape(name: str):
        type_id = library.btf__find_by_name_kind(btf, name.encode(), BTF_KIND_STRUCT)
        assert type_id > 0, f"struct {name} not in the kernel's BTF"
        found = type_shape(btf, type_id)
        return found.size, {member: (bits // 8, size // 8) for member, bits, size in found.members}

    yield shape
    library.btf__free(btf)


@pytest.mark.parametrize("family,struct", [(IPV4, "ipt_entry"), (IPV6, "ip6t_entry")])
def test_entry_offsets_are_the_kernels(kernel, family, struct):
    _, members = kernel(struct)
    assert (members["target_offset"][0], members["next_offset"][0], members["counters"]) == \
        (family.target_offset, family.next_offset, (family.counters, 16))


def test_getinfo_entries_and_counters_headers_are_the_kernels(kernel):
    for name in ("ipt_getinfo", "ip6t_getinfo"):
        assert kernel(name)[0] == _IPT_GETINFO.size
    for name in ("ipt_get_entries", "ip6t_get_entries"):
        assert kernel(name)[1]["entrytable"][0] == _IPT_GET_ENTRIES_HEADER
    size, members = kernel("xt_counters_info")
    assert (size, members["name"][1], members["counters"][0]) == (_COUNTERS_INFO.size, XT_TABLE_MAXNAMELEN,
                                                                  _COUNTERS_INFO.size)
    assert kernel("xt_counters")[0] == _COUNTER.size
    # struct xt_entry_target: the user view's size and name, then the data
    # (an ERROR target's data is the chain name)
    size, _ = kernel("xt_entry_target")
    assert size == _ERROR_NAME_OFFSET and _TARGET_NAME.size <= size
