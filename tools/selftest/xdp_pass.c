// SPDX-License-Identifier: GPL-2.0
/*
 * An XDP program that passes every packet, multi-buffer capable
 * ("xdp.frags": the core refuses single-buffer XDP with header split).
 * zcrx-selftest attaches it to check that XDP and a memory provider exclude
 * each other. Built by `make` with clang's BPF target; no headers needed.
 */
__attribute__((section("xdp.frags"), used)) int xdp_pass(void *ctx)
{
	return 2; /* XDP_PASS */
}

char _license[] __attribute__((section("license"), used)) = "GPL";
