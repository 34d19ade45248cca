#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make bench`: boot the VM once, run every receive mode interleaved, print
# the table of medians and the ratios.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() {
	cat <<USAGE
usage: scripts/bench.sh [--rounds N] [--bytes BYTES] [--modes "copy trunc iouring-zcrx zcrx-rs"]

One flow per run over the netdevsim pair (header split on, queue 0), the
receiver pinned to vCPU 1, the sender to vCPU 0; modes interleaved, N
rounds (default 5) of BYTES (default 256 MiB). Results:
\$ZCRX_CACHE/build/fast/bench/results-DATE.jsonl (+ .summary.json). Under
TCG absolute numbers mean little; compare the ratios of one run.
USAGE
}
rounds=5 bytes=$((256 << 20)) modes="copy trunc iouring-zcrx zcrx-rs"
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) rounds=$2; shift ;;
	--bytes) bytes=$2; shift ;;
	--modes) modes=$2; shift ;;
	-h|--help) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
	shift
done
B=$(build_dir fast)
D=$B/bench
mkdir -p "$D"
out=$D/results-$(date -u +%Y%m%dT%H%M%SZ).jsonl
stage_begin bench
"$ZCRX_TOP/scripts/vm.sh" --name bench --timeout 3600 --rwdir "$D" -- \
	env BENCH_OUT="$out" BENCH_ROUNDS="$rounds" BENCH_BYTES="$bytes" BENCH_MODES="$modes" \
	bash "$ZCRX_TOP/scripts/guest-bench.sh"
stage_end
echo
"$ZCRX_TOP/tools/target/release/zcrx-bench" --report "$out"
