// SPDX-License-Identifier: GPL-2.0
//
// steer.bpf.c: the XDP steering program of the reliable-multicast engine.
//
// What it does: for every frame received on the interface it is attached to,
// if the EtherType is the engine's (from `config`) and the destination MAC is
// either a subscribed group MAC (`groups`) or the interface's own MAC, it
// redirects the frame into the AF_XDP socket registered for the receiving
// queue (`xsks`, indexed by rx_queue_index). Every other frame goes on to the
// kernel stack (XDP_PASS), so ARP, IP and everything else keep working.
//
// What it never does: it never modifies a frame, never drops a frame that is
// not of our EtherType, and never drops one of ours except through the
// `drop_ratio` testing knob. If no socket is registered for the queue, the
// redirect falls back to XDP_PASS (counted as redirect_failed).
//
// The map layout below is mirrored by engine/xsk/src/loader.rs; keep them in
// sync (names, key and value sizes, counter indices).

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

// Configuration written once by the loader before attach.
struct steer_config {
	__u16 ethertype;   // host byte order
	__u8 own_mac[6];   // the interface's own MAC
};

// Counter indices in `counters`. Mirrored by `Counter` in loader.rs.
enum {
	CNT_REDIRECTED = 0,      // handed to bpf_redirect_map successfully
	CNT_PASSED = 1,          // not our EtherType: to the kernel stack
	CNT_NOT_SUBSCRIBED = 2,  // our EtherType, destination neither subscribed nor own MAC
	CNT_REDIRECT_FAILED = 3, // our frame but no socket for the queue: passed instead
	CNT_DROPPED_INJECTED = 4,// dropped by the drop_ratio testing knob
	CNT_MAX = 5,
};

// Key of `groups`: a 6-byte MAC padded with two zero bytes to 8.
struct mac_key {
	__u8 mac[6];
	__u8 pad[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct steer_config);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct mac_key);
	__type(value, __u8);
} groups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

// TESTING KNOB: drop our-EtherType frames at random before redirect.
// The single u32 value is a threshold out of 2^32: a frame is dropped when
// bpf_get_prandom_u32() < threshold. 0 (the default) turns it off. It exists
// to exercise loss recovery on links that never lose; never set it in
// production.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} drop_ratio SEC(".maps");

static __always_inline void count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &idx);
	if (c)
		*c += 1; // per-CPU slot: no atomics needed
}

static __always_inline int mac_eq(const __u8 *a, const __u8 *b)
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] &&
	       a[3] == b[3] && a[4] == b[4] && a[5] == b[5];
}

SEC("xdp")
int steer(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 zero = 0;

	if ((void *)(eth + 1) > data_end) {
		count(CNT_PASSED);
		return XDP_PASS;
	}

	struct steer_config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg || cfg->ethertype == 0 || eth->h_proto != bpf_htons(cfg->ethertype)) {
		count(CNT_PASSED);
		return XDP_PASS;
	}

	struct mac_key key = {};
	__builtin_memcpy(key.mac, eth->h_dest, 6);
	if (!mac_eq(eth->h_dest, cfg->own_mac) && !bpf_map_lookup_elem(&groups, &key)) {
		count(CNT_NOT_SUBSCRIBED);
		return XDP_PASS;
	}

	__u32 *threshold = bpf_map_lookup_elem(&drop_ratio, &zero);
	if (threshold && *threshold != 0 && bpf_get_prandom_u32() < *threshold) {
		count(CNT_DROPPED_INJECTED);
		return XDP_DROP;
	}

	// The flags argument (XDP_PASS) is the action when no socket is bound at
	// this index, so a missing socket degrades to the kernel stack.
	long action = bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
	if (action == XDP_REDIRECT)
		count(CNT_REDIRECTED);
	else
		count(CNT_REDIRECT_FAILED);
	return action;
}

char LICENSE[] SEC("license") = "GPL";
