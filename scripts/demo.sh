#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make demo`: boot the test kernel and show zcrx_rs working.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() {
	cat <<USAGE
usage: scripts/demo.sh [--flavour fast|debug]

Boots the test VM and runs scripts/guest-demo.sh inside: a netdevsim pair
with header split on, zcrx_rs loaded, 128 MiB of random data sent over TCP
and received zero-copy by tools/zcrx-nc; sha256sum of both ends, the
zero-copy/copied byte counts and netdevsim's DMA counter; then teardown and
rmmod. Expects the kernel, module and tools to be built (make demo does
that).
USAGE
}
flavour=fast
while [ $# -gt 0 ]; do
	case $1 in
	--flavour|--flavor) flavour=$2; shift ;;
	-h|--help) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
	shift
done
stage_begin demo
"$ZCRX_TOP/scripts/vm.sh" --flavour "$flavour" --name demo --timeout 600 -- \
	bash "$ZCRX_TOP/scripts/guest-demo.sh"
stage_end
