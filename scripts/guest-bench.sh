#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Runs inside the VM for `make bench`: every mode of zcrx-bench on the same
# netdevsim queue, interleaved, ROUNDS times; one JSON line per run. The
# zero-copy modes run at every buffer size of BENCH_BUF_SIZES, each at its
# MTU (BENCH_MTU, or the buffer size + 72: one IPv6 segment with TCP
# timestamps fills one buffer); copy and trunc run at every MTU in use.
set -eu
B=${ZCRX_BUILD:?run through scripts/vm.sh}
TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$TOP/scripts/guest-lib.sh"
OUT=${BENCH_OUT:?}
ROUNDS=${BENCH_ROUNDS:-5}
BYTES=${BENCH_BYTES:-1073741824}
MODES=${BENCH_MODES:-"copy trunc iouring-zcrx zcrx-rs"}
RCVLOWAT=${BENCH_RCVLOWAT:-1048576}
BUF_SIZES=${BENCH_BUF_SIZES:-"4096 32768"}
# The area of each zero-copy receiver (zcrx-bench --area), MiB.
AREA_MIB=${BENCH_AREA_MIB:-64}
BENCH=$TOP/tools/target/release/zcrx-bench

# The MTU of buffer size $1.
mtu_of() {
	echo "${BENCH_MTU:-$(($1 + 72))}"
}
is_zc() {
	case ${1%@b} in iouring-zcrx|zcrx-rs|zcrx-rs-nomerge|zcrx-rs-copy) return 0 ;; esac
	return 1
}
MTUS=
for bs in $BUF_SIZES; do
	case " $MTUS " in *" $(mtu_of "$bs") "*) ;; *) MTUS="$MTUS $(mtu_of "$bs")" ;; esac
done
set_mtu() {
	[ "${CUR_MTU:-}" = "$1" ] && return
	ip -n nsa link set "$NSIM_A" mtu "$1"
	ip -n nsb link set "$NSIM_B" mtu "$1"
	CUR_MTU=$1
}

# Buffers larger than a page are hugetlbfs memory (a NIC writes a buffer as
# one DMA range; the test kernel has no THP). Reserve the areas of both
# zero-copy receivers: an area stays pinned after its receiver exits until
# the page pool has given back its last buffer, so the next receiver may
# register while the last one's area is still held.
HUGE_KB=$(awk '/^Hugepagesize:/ {print $2}' /proc/meminfo)
AREA_HUGE=$(( (AREA_MIB * 1024 + HUGE_KB - 1) / HUGE_KB ))
for bs in $BUF_SIZES; do
	if [ "$bs" -gt "$(getconf PAGESIZE)" ]; then
		# The queues series gives io_uring zcrx an area per queue (4).
		areas=2
		case " ${BENCH_SCALE:+${BENCH_SERIES:-queues}} " in *" queues "*) areas=5 ;; esac
		want=$((areas * AREA_HUGE + 1))
		echo "$want" > /proc/sys/vm/nr_hugepages
		got=$(cat /proc/sys/vm/nr_hugepages)
		[ "$got" -ge "$want" ] || { echo "asked for $want huge pages, got $got" >&2; exit 1; }
		echo "reserved $got huge pages of $HUGE_KB kB for ${AREA_MIB} MiB areas of buffers over a page" >&2
		break
	fi
done
# Waits (up to 20 s) until an area's worth of huge pages is free again.
wait_huge_free() {
	local i
	for i in $(seq 40); do
		# io_uring zcrx takes an area per bound queue.
		[ "$(awk '/^HugePages_Free:/ {print $2}' /proc/meminfo)" -ge $((${QUEUES:-1} * AREA_HUGE)) ] && return 0
		[ $((i % 4)) = 0 ] && kick_softirqs
		sleep 0.5
	done
	echo "huge pages still held after 20 s: $(grep HugePages_ /proc/meminfo | tr '\n' ' ')" >&2
}

# The receiver has CPU 1 to itself; on one vCPU (bench.sh --cpus 1)
# everything shares CPU 0 and the receiver runs only when the sender and
# the NAPI threads let it (the "same core" case).
RX_CPU=1
[ "$(nproc)" -gt 1 ] || RX_CPU=0
nsim_up 1
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
# One flow in mode $1 with buffers of $2 bytes (0: a mode without an
# area): the receiver's JSON line lands in /tmp/bench-run.json. Any further
# arguments wrap the sender's command (see perf_sender).
# FLOWS (default 1): connections per run; WSIZE: the sender's write size.
one_run() {
	local m=$1 bs=$2 rx buf=() flows=(--flows "${FLOWS:-1}") ws=() qs=()
	shift 2
	[ -z "${WSIZE:-}" ] || ws=(--write-size "$WSIZE")
	[ -z "${QUEUES:-}" ] || qs=(--queues "$QUEUES")
	[ -z "${BENCH_SPLIT:-}" ] || qs+=(--split)
	[ -z "${BENCH_MARK:-}" ] || qs+=(--mark)
	# FIXED_PORT and SRC_PORT: the same 4-tuples for every mode of a point
	# (so RSS spreads the flows the same way); else a new port per run.
	if [ -n "${FIXED_PORT:-}" ]; then port=$FIXED_PORT; else port=$((port + 1)); fi
	[ -z "${SRC_PORT:-}" ] || ws+=(--src-port "$SRC_PORT")
	if [ "$bs" != 0 ]; then
		buf=(--buf-size "$bs" --area "$AREA_MIB")
		if [ "$bs" -gt "$(getconf PAGESIZE)" ]; then wait_huge_free; fi
	fi
	ip netns exec nsa "$BENCH" -s --mode "$m" --port $port --dev "$NSIM_A" --queue 0 "${qs[@]}" "${buf[@]}" \
		--cpu "$RX_CPU" --rcvlowat "$RCVLOWAT" "${flows[@]}" --json > /tmp/bench-run.json &
	rx=$!
	RX_PID=$rx # ip netns exec execs the receiver: same pid
	pin_napi_threads
	"$@" ip netns exec nsb "$BENCH" -c 2001:db8::1 --port $port -n "$BYTES" --cpu 0 "${flows[@]}" "${ws[@]}"
	# The receiver exits 1 on a wrong byte: set -e ends the run here.
	wait $rx
	grep -q "\"bytes\":$BYTES," /tmp/bench-run.json || {
		echo "$m: received $(grep -o '"bytes":[0-9]*' /tmp/bench-run.json) of $BYTES bytes" >&2
		return 1
	}
}
# Calls "$1 MODE BUF_SIZE" for every flow of a round, in order: per MTU,
# each mode in the order given, a zero-copy mode once per buffer size of
# that MTU, copy and trunc once.
each_flow() {
	local mtu m bs
	for mtu in $MTUS; do
		set_mtu "$mtu"
		for m in $MODES; do
			if ! is_zc "$m"; then
				"$1" "$m" 0
				continue
			fi
			for bs in $BUF_SIZES; do
				if [ "$(mtu_of "$bs")" = "$mtu" ]; then "$1" "$m" "$bs"; fi
			done
		done
	done
}
# dma_bytes and fallback_packets of netdevsim's receiving queues (queue 0,
# or all NQUEUES), one "dma fb" line per queue.
nsim_rx_stats() {
	local q line
	for q in $(seq 0 $((${NQUEUES:-1} - 1))); do
		line=$(hds_stats 1 "$q")
		echo "$(stat_get "$line" dma_bytes) $(stat_get "$line" fallback_packets)"
	done
}
measure() {
	local m=$1 bs=$2 base=${1%@b} before after dma fb perq
	case $base in
	zcrx-rs*) if [ "$base" != "$m" ]; then use_module b; else use_module a; fi ;;
	esac
	before=$(nsim_rx_stats)
	one_run "$base" "$bs"
	after=$(nsim_rx_stats)
	# Per queue: bytes DMA'd in this run (where RSS put the flows).
	perq=$(paste -d' ' <(echo "$before") <(echo "$after") | awk '{printf "%s%.0f", (NR > 1 ? "," : ""), $3 - $1}')
	dma=$(echo "$perq" | tr ',' '\n' | awk '{s += $1} END {printf "%.0f", s}')
	fb=$(paste -d' ' <(echo "$before") <(echo "$after") | awk '{s += $4 - $2} END {printf "%.0f", s}')
	sed -e "s/}\$/,\"round\":$r,\"clock\":\"${BENCH_CLOCK:-wall}\",\"vcpus\":$(nproc),\"mtu\":$CUR_MTU,\"nsim_dma_bytes\":$dma,\"nsim_dma_bytes_per_queue\":[$perq],\"nsim_fallback_packets\":$fb}/" \
		-e "s/\"mode\":\"$base\"/\"mode\":\"$m\"/" /tmp/bench-run.json | tee -a "$OUT"
}
# --scale: how the cost grows, zero-copy modes at the first buffer size:
# with the sender's write size (one flow), then with the number of flows
# sharing the queue (64 KiB writes; the 1-flow point is the write-size
# series' 64 KiB one), then with the number of bound queues (8 flows, 64
# KiB writes, on a pair of 4-queue devices whose RSS spreads the flows
# over the first 1, 2 or 4 queues: zcrx-rs binds them all to one context,
# io_uring zcrx has an instance per queue). BENCH_SERIES picks series.
scale_measure() {
	local m=$1 bs=$2 series=$3
	measure "$m" "$bs"
	sed -i -e "\$s/}\$/,\"series\":\"$series\",\"write_size\":${WSIZE:-262144},\"queues\":${QUEUES:-1}}/" "$OUT"
}
SERIES=${BENCH_SERIES:-write_size flows queues}
has_series() {
	case " $SERIES " in *" $1 "*) return 0 ;; esac
	return 1
}
# The rx queues of the receiving device that RSS spreads flows over.
ETHTOOL=$ZCRX_CACHE/ethtool/root/usr/sbin/ethtool
set_rss() {
	ip netns exec nsa "$ETHTOOL" -X "$NSIM_A" equal "$1"
}
# A fresh device pair of $1 queues, set up as at the start.
nsim_setup() {
	nsim_down
	nsim_up "$1"
	NQUEUES=$1
	hds_set nsa "$NSIM_A" on
	ip netns exec nsa sh -c "echo 1 > /sys/class/net/$NSIM_A/threaded"
	ip netns exec nsb sh -c "echo 1 > /sys/class/net/$NSIM_B/threaded"
	unset CUR_MTU
}
if [ -n "${BENCH_SCALE:-}" ]; then
	bs=${BUF_SIZES%% *}
	set_mtu "$(mtu_of "$bs")"
	for r in $(seq "$ROUNDS"); do
		if has_series write_size; then
			for WSIZE in 4096 65536 1048576; do
				for m in $MODES; do
					if is_zc "$m"; then FLOWS=1 scale_measure "$m" "$bs" write_size; fi
				done
			done
		fi
		WSIZE=65536
		if has_series flows; then
			for FLOWS in 8 64; do
				for m in $MODES; do
					if is_zc "$m"; then scale_measure "$m" "$bs" flows; fi
				done
			done
		fi
		unset FLOWS WSIZE
	done
	if has_series queues; then
		[ -x "$ETHTOOL" ] || { echo "no current ethtool at $ETHTOOL (scripts/toolchain.sh fetches it)" >&2; exit 1; }
		use_module a
		wait_module_idle > /dev/null
		nsim_setup 4
		set_mtu "$(mtu_of "$bs")"
		# Every mode of a point connects the same 4-tuples (fixed ports),
		# so RSS gives each the same spread; the sender reuses its ports
		# out of TIME_WAIT.
		ip netns exec nsb sysctl -qw net.ipv4.tcp_tw_reuse=1
		for r in $(seq "$ROUNDS"); do
			for QUEUES in 1 2 4; do
				set_rss "$QUEUES"
				for m in $MODES; do
					if is_zc "$m"; then
						FIXED_PORT=$((7000 + 10 * r + QUEUES)) SRC_PORT=$((40000 + 100 * r)) \
							FLOWS=8 WSIZE=65536 scale_measure "$m" "$bs" queues
					fi
				done
			done
		done
		unset QUEUES
		# Back to the one-queue pair for what follows (--profile).
		use_module a
		wait_module_idle > /dev/null
		nsim_setup 1
	fi
else
	for r in $(seq "$ROUNDS"); do
		each_flow measure
	done
fi
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
		perf record -q -C "$RX_CPU" -e cpu-clock -F ${BENCH_PROFILE_HZ:-4000} -o /tmp/perf.data -- "$@" 2>/dev/null
	}
	profile() {
		local m=$1 bs=$2 base=${1%@b} f
		case $base in
		zcrx-rs*) if [ "$base" != "$m" ]; then use_module b; else use_module a; fi ;;
		esac
		one_run "$base" "$bs" perf_sender
		f=$(dirname "$OUT")/profile-$m$([ "$bs" = 0 ] || echo "-$bs")-mtu$CUR_MTU.txt
		{
			cat /tmp/bench-run.json
			perf report -q -i /tmp/perf.data --stdio --no-children --sort comm -F overhead,sample,comm
			echo
			perf report -q -i /tmp/perf.data --stdio --no-children --pid "$RX_PID" \
				--percentage relative --sort sym --percent-limit 0.8
			# The receiving device's NAPI threads (netdevsim's emulated
			# DMA, GRO, the page pool's allocations): % of all samples.
			echo
			echo "NAPI threads of $NSIM_A:"
			perf report -q -i /tmp/perf.data --stdio --no-children --sort comm,sym --percent-limit 0.2 |
				grep "napi/$NSIM_A" || true
			# The same samples by address, the module's symbols
			# resolved through /proc/kallsyms (perf cannot find the
			# out-of-tree module on disk and says [unknown]).
			echo
			echo "receiver, by /proc/kallsyms:"
			perf script -i /tmp/perf.data --pid "$RX_PID" -F ip,sym 2>/dev/null |
				python3 "$TOP/scripts/ksym-profile.py" 30 || true
			echo
			echo "NAPI threads of $NSIM_A, by /proc/kallsyms:"
			perf script -i /tmp/perf.data -F comm,ip,sym 2>/dev/null |
				python3 "$TOP/scripts/ksym-profile.py" 30 "napi/$NSIM_A-" || true
		} > "$f" 2>&1 || true
		echo "profile of $m: $f" >&2
	}
	each_flow profile
fi
# With --insn (BENCH_INSN: the plugin's output prefix): one more run of
# every mode with its measured window marked for scripts/qemu-insn-plugin.c,
# which counts every guest instruction in it exactly. Window n's mode and
# JSON go to PREFIX.windows, the symbols of modules and BPF programs to
# PREFIX.modsyms.n (a reload may move them), the kernel's to PREFIX.kallsyms.
if [ -n "${BENCH_INSN:-}" ]; then
	echo 0 > /proc/sys/kernel/kptr_restrict
	grep -v '\[' /proc/kallsyms > "$BENCH_INSN.kallsyms"
	: > "$BENCH_INSN.windows"
	INSN_N=0
	insn() {
		local m=$1 bs=$2 base=${1%@b}
		case $base in
		zcrx-rs*) if [ "$base" != "$m" ]; then use_module b; else use_module a; fi ;;
		esac
		BENCH_MARK=1 one_run "$base" "$bs"
		INSN_N=$((INSN_N + 1))
		grep '\[' /proc/kallsyms > "$BENCH_INSN.modsyms.$INSN_N" || true
		echo "$INSN_N $m $bs $CUR_MTU $(cat /tmp/bench-run.json)" >> "$BENCH_INSN.windows"
		echo "instruction counts of $m: window $INSN_N" >&2
	}
	each_flow insn
fi
nsim_down
wait_module_idle >&2
rmmod zcrx_rs
