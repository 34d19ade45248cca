#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Runs inside the VM for `make bench`: every mode of zcrx-bench on the same
# netdevsim queue, interleaved, ROUNDS times; one JSON line per run.
set -eu
B=${ZCRX_BUILD:?run through scripts/vm.sh}
TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$TOP/scripts/guest-lib.sh"
OUT=${BENCH_OUT:?}
ROUNDS=${BENCH_ROUNDS:-5}
BYTES=${BENCH_BYTES:-1073741824}
MODES=${BENCH_MODES:-"copy trunc iouring-zcrx zcrx-rs"}
RCVLOWAT=${BENCH_RCVLOWAT:-1048576}
BENCH=$TOP/tools/target/release/zcrx-bench

MTU=${BENCH_MTU:-4168}

nsim_up 1
ip -n nsa link set "$NSIM_A" mtu "$MTU"
ip -n nsb link set "$NSIM_B" mtu "$MTU"
hds_set nsa "$NSIM_A" on
# Both devices poll in NAPI threads, and those threads run on CPU 0 only,
# with the sender; the receiver has CPU 1 to itself. Without threads the
# poll runs where netdevsim's timer was armed, and the receiver's ACKs arm
# the peer's timer on CPU 1.
ip netns exec nsa sh -c "echo 1 > /sys/class/net/$NSIM_A/threaded"
ip netns exec nsb sh -c "echo 1 > /sys/class/net/$NSIM_B/threaded"
MODULE_A=${BENCH_MODULE:-$B/zcrx-module/rust/zcrx_rs.ko}
MODULE_B=${BENCH_MODULE_B:-}
insmod "$MODULE_A"
loaded=a
# A mode "M@b" is mode M with module B loaded (--module-b): the two builds
# take turns in one VM run, flow by flow.
use_module() {
	[ "$loaded" = "$1" ] && return
	wait_module_idle > /dev/null
	rmmod zcrx_rs
	if [ "$1" = b ]; then insmod "$MODULE_B"; else insmod "$MODULE_A"; fi
	loaded=$1
}
: > "$OUT"
port=6000
# Binding a queue restarts it, and the restart starts a new NAPI thread on
# any CPU: pin them all again once the receiver is listening.
pin_napi_threads() {
	local p i
	for i in $(seq 200); do
		ip netns exec nsa ss -Hltn "sport = :$port" | grep -q . && break
		sleep 0.05
	done
	for p in $(pgrep '^napi/'); do
		taskset -pc 0 "$p" > /dev/null || return 1
	done
}
# One flow in mode $1: the receiver's JSON line lands in /tmp/bench-run.json.
# Any further arguments wrap the sender's command (see perf_sender).
one_run() {
	local m=$1 rx
	shift
	port=$((port + 1))
	ip netns exec nsa "$BENCH" -s --mode "$m" --port $port --dev "$NSIM_A" --queue 0 \
		--cpu 1 --rcvlowat "$RCVLOWAT" --json > /tmp/bench-run.json &
	rx=$!
	RX_PID=$rx # ip netns exec execs the receiver: same pid
	pin_napi_threads
	"$@" ip netns exec nsb "$BENCH" -c 2001:db8::1 --port $port -n "$BYTES" --cpu 0
	wait $rx
}
for r in $(seq "$ROUNDS"); do
	for m in $MODES; do
		base=${m%@b}
		case $base in
		zcrx-rs*) if [ "$base" != "$m" ]; then use_module b; else use_module a; fi ;;
		esac
		before=$(hds_stats 1 0)
		one_run "$base"
		after=$(hds_stats 1 0)
		dma=$(( $(stat_get "$after" dma_bytes) - $(stat_get "$before" dma_bytes) ))
		fb=$(( $(stat_get "$after" fallback_packets) - $(stat_get "$before" fallback_packets) ))
		sed -e "s/}\$/,\"round\":$r,\"nsim_dma_bytes\":$dma,\"nsim_fallback_packets\":$fb}/" \
			-e "s/\"mode\":\"$base\"/\"mode\":\"$m\"/" /tmp/bench-run.json | tee -a "$OUT"
	done
done
# With --profile: one more run of every mode with the receiver's CPU
# sampled by perf (cpu-clock: TCG has no PMU); per mode, where the receiver's
# time went (its own pid: not the sender's start-up, which runs on CPU 1
# until it pins itself). It includes the receiver's set-up after accept
# (the pattern table), which the measured figures leave out.
if [ -n "${BENCH_PROFILE:-}" ]; then
	echo 0 > /proc/sys/kernel/kptr_restrict
	# The receiver's set-up (pinning, binding) stays out of the profile.
	perf_sender() {
		sleep 1
		perf record -q -C 1 -e cpu-clock -F 4000 -o /tmp/perf.data -- "$@" 2>/dev/null
	}
	for m in $MODES; do
		one_run "$m" perf_sender
		f=$(dirname "$OUT")/profile-$m.txt
		{
			cat /tmp/bench-run.json
			perf report -q -i /tmp/perf.data --stdio --no-children --sort comm -F overhead,sample,comm
			echo
			perf report -q -i /tmp/perf.data --stdio --no-children --pid "$RX_PID" \
				--percentage relative --sort sym --percent-limit 0.8
		} > "$f" 2>&1 || true
		echo "profile of $m: $f" >&2
	done
fi
nsim_down
wait_module_idle >&2
rmmod zcrx_rs
