#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make bench`: boot the VM once, run every receive mode interleaved, print
# the table of medians and the ratios.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() {
	cat <<USAGE
usage: scripts/bench.sh [--rounds N] [--bytes BYTES] [--modes "copy trunc iouring-zcrx zcrx-rs"] [--profile]

One flow per run over the netdevsim pair (header split on, queue 0), the
receiver pinned to vCPU 1, the sender to vCPU 0; modes interleaved, N
rounds (default 5) of BYTES (default 1 GiB: /proc/stat counts CPU time in
10 ms ticks, a zero-copy GiB costs a few tens of them). Results:
\$ZCRX_CACHE/build/fast/bench/results-DATE.jsonl (+ .summary.json). Under
TCG absolute numbers mean little; compare the ratios of one run.
--profile: afterwards one run of each zero-copy mode under perf (all CPUs,
cpu-clock sampling); reports per CPU and symbol next to the results.
USAGE
}
profile= rounds=5 bytes=$((1 << 30)) modes="copy trunc iouring-zcrx zcrx-rs"
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) rounds=$2; shift ;;
	--bytes) bytes=$2; shift ;;
	--modes) modes=$2; shift ;;
	--profile) profile=1 ;;
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
rc=0
"$ZCRX_TOP/scripts/vm.sh" --name bench --timeout 3600 --rwdir "$D" -- \
	env BENCH_OUT="$out" BENCH_ROUNDS="$rounds" BENCH_BYTES="$bytes" BENCH_MODES="$modes" BENCH_PROFILE="$profile" \
	bash "$ZCRX_TOP/scripts/guest-bench.sh" || rc=$?
stage_end
echo
[ -s "$out" ] || die "no results in $out (VM exit code $rc): see the output above"
"$ZCRX_TOP/tools/target/release/zcrx-bench" --report "$out"
[ "$rc" = 0 ] || die "the VM run failed (exit code $rc) after the runs above: see its output"
