#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make demo`: boot the test kernel and show zcrx_rs working.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() {
	cat <<USAGE
usage: scripts/demo.sh [--flavour fast|debug] [--module KO]

Boots the test VM and runs scripts/guest-demo.sh inside: a netdevsim pair
with header split on, zcrx_rs loaded, 128 MiB of random data sent over TCP
(IPv4: netdevsim's TSO lets the sender's 64 KiB segments fill buffers as
a NIC with LRO/HW-GRO does) and received zero-copy by tools/zcrx-nc, twice:
into 4 KiB buffers, then into 32 KiB buffers (zcrx-nc --buf-size 32768, a
hugetlbfs area: the guest reserves the huge pages). Each time sha256sum of
both ends, the zero-copy/copied byte counts and netdevsim's DMA counter;
then the two side by side, teardown and rmmod. Expects the kernel, module
and tools to be built (make demo does that).
--module KO: load this zcrx_rs.ko (built for the flavour's kernel) instead
of the tree's.
USAGE
}
flavour=fast module=
while [ $# -gt 0 ]; do
	case $1 in
	--flavour|--flavor) flavour=$2; shift ;;
	--module) module=$(realpath "$2"); shift ;;
	-h|--help) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
	shift
done
[ -z "$module" ] || [ -f "$module" ] || die "no module at $module"
stage_begin demo
"$ZCRX_TOP/scripts/vm.sh" --flavour "$flavour" --name demo --timeout 900 -- \
	env DEMO_MODULE="$module" bash "$ZCRX_TOP/scripts/guest-demo.sh"
stage_end
