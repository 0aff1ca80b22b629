/* Host program (not BPF): prints the sizes and field offsets of the libbpf
 * structs that linuxfp/datapath/libbpf.py mirrors with ctypes, as
 * "struct.field offset" / "struct sizeof size" lines, so a test can compare
 * them with the installed headers. */
#include <stddef.h>
#include <stdio.h>
#include <bpf/libbpf.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>

#define SIZE(s) printf(#s " sizeof %zu\n", sizeof(struct s))
#define FIELD(s, f) printf(#s "." #f " %zu\n", offsetof(struct s, f))

int main(void)
{
	SIZE(bpf_object_open_opts);
	FIELD(bpf_object_open_opts, object_name);
	FIELD(bpf_object_open_opts, relaxed_maps);
	FIELD(bpf_object_open_opts, pin_root_path);
	FIELD(bpf_object_open_opts, kconfig);
	FIELD(bpf_object_open_opts, btf_custom_path);
	FIELD(bpf_object_open_opts, kernel_log_buf);
	FIELD(bpf_object_open_opts, kernel_log_size);
	FIELD(bpf_object_open_opts, kernel_log_level);

	SIZE(bpf_test_run_opts);
	FIELD(bpf_test_run_opts, data_in);
	FIELD(bpf_test_run_opts, data_out);
	FIELD(bpf_test_run_opts, data_size_in);
	FIELD(bpf_test_run_opts, data_size_out);
	FIELD(bpf_test_run_opts, ctx_in);
	FIELD(bpf_test_run_opts, ctx_out);
	FIELD(bpf_test_run_opts, ctx_size_in);
	FIELD(bpf_test_run_opts, ctx_size_out);
	FIELD(bpf_test_run_opts, retval);
	FIELD(bpf_test_run_opts, repeat);
	FIELD(bpf_test_run_opts, duration);
	FIELD(bpf_test_run_opts, flags);
	FIELD(bpf_test_run_opts, cpu);
	FIELD(bpf_test_run_opts, batch_size);

	SIZE(bpf_link_create_opts);
	FIELD(bpf_link_create_opts, flags);
	FIELD(bpf_link_create_opts, iter_info);
	FIELD(bpf_link_create_opts, iter_info_len);
	FIELD(bpf_link_create_opts, target_btf_id);

	SIZE(bpf_link_update_opts);
	FIELD(bpf_link_update_opts, flags);
	FIELD(bpf_link_update_opts, old_prog_fd);

	SIZE(bpf_map_batch_opts);
	FIELD(bpf_map_batch_opts, elem_flags);
	FIELD(bpf_map_batch_opts, flags);

	SIZE(bpf_xdp_query_opts);
	FIELD(bpf_xdp_query_opts, prog_id);
	FIELD(bpf_xdp_query_opts, drv_prog_id);
	FIELD(bpf_xdp_query_opts, hw_prog_id);
	FIELD(bpf_xdp_query_opts, skb_prog_id);
	FIELD(bpf_xdp_query_opts, attach_mode);

	SIZE(bpf_tc_hook);
	FIELD(bpf_tc_hook, ifindex);
	FIELD(bpf_tc_hook, attach_point);
	FIELD(bpf_tc_hook, parent);

	SIZE(bpf_tc_opts);
	FIELD(bpf_tc_opts, prog_fd);
	FIELD(bpf_tc_opts, flags);
	FIELD(bpf_tc_opts, prog_id);
	FIELD(bpf_tc_opts, handle);
	FIELD(bpf_tc_opts, priority);

	SIZE(btf_type);
	SIZE(btf_var_secinfo);
	FIELD(btf_var_secinfo, offset);
	FIELD(btf_var_secinfo, size);

	/* uapi info structs: we read them as raw bytes at these offsets */
	FIELD(bpf_prog_info, type);
	FIELD(bpf_prog_info, id);
	FIELD(bpf_prog_info, tag);
	FIELD(bpf_prog_info, name);
	FIELD(bpf_prog_info, ifindex);
	FIELD(bpf_prog_info, xlated_prog_len);
	FIELD(bpf_prog_info, nr_map_ids);
	FIELD(bpf_prog_info, map_ids);
	FIELD(bpf_map_info, type);
	FIELD(bpf_map_info, id);
	FIELD(bpf_map_info, key_size);
	FIELD(bpf_map_info, value_size);
	FIELD(bpf_map_info, max_entries);
	FIELD(bpf_map_info, map_flags);
	FIELD(bpf_map_info, name);
	FIELD(bpf_link_info, type);
	FIELD(bpf_link_info, id);
	FIELD(bpf_link_info, prog_id);
	FIELD(bpf_link_info, xdp.ifindex);
	return 0;
}
