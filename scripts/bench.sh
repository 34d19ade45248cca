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
                       (more modes: zcrx-rs-copy, bound and unbound: RECV's copy fallback;
                       zcrx-rs-nomerge, one record per buffer)
                       [--buf-sizes "4096 32768"] [--mtu MTU] [--rcvlowat BYTES]
                       [--profile] [--module KO] [--module-b KO] [--icount [SHIFT]] [--cpus 1|2]
                       [--scale [--series "write_size flows queues"]] [--split] [--insn]

One flow per run over the netdevsim pair (header split on, queue 0), the
receiver pinned to vCPU 1; the sender and both devices' NAPI threads on
vCPU 0. Modes interleaved, N rounds (default 5) of BYTES (default 1 GiB).
--buf-sizes (default "4096 32768"): the zero-copy modes (iouring-zcrx,
zcrx-rs, zcrx-rs-copy) run once per buffer size in every round, with a
64 MiB area each (zcrx-rs: REGISTER_AREA buf_size; io_uring zcrx:
rx_buf_len); buffers over 4 KiB are hugetlbfs memory, and the guest
reserves huge pages for two areas (a finished receiver's area stays pinned
until its page pool lets go). Each buffer size has its MTU, the same for
both zero-copy modes; copy and trunc run once at every MTU in use, so
each buffer size's ratios compare flows at one MTU.
--mtu: by default the buffer size + 72, so that one IPv6 segment (40-byte
header, 20-byte TCP header, 12 bytes of timestamps) carries exactly one
buffer of payload: 4168 for 4096 (the io_uring zcrx numbers were taken at
a 4K MTU), 32840 for 32768. netdevsim has no TSO for IPv6, so every
segment arrives on its own and takes a buffer of its own: at MTU 4168 a
32 KiB buffer would hold 4 KiB, an eighth of the memory and of the socket's
receive-buffer charge doing work. At 32840 each segment fills its 32 KiB
buffer, as a NIC with LRO/HW-GRO fills one from 1500-byte frames; the
larger MTU also means an eighth of the packets, which is why copy and
trunc run at it too. --mtu MTU: every flow at MTU.
--rcvlowat (default 1 MiB): SO_RCVLOWAT for every mode. A wake-up spins on
the socket lock while the NAPI thread that woke it still holds it, and TCG
runs that section slowly: at 1 byte the spin is 40-70% of the receiver's
time in every mode. Pass 0 to see it.
Results: \$ZCRX_CACHE/build/fast/bench/results-DATE.jsonl (+ .summary.json).
Under TCG absolute numbers mean little; compare the ratios of one run.
--icount [SHIFT] (default 0): QEMU counts instructions instead of running
against the host's clock (-icount shift=SHIFT,sleep=off,align=off): guest
time advances 2^SHIFT ns per instruction executed, both vCPUs run in turn
on one host thread, and the host's load and speed drop out. Receiver CPU
per GiB then means instructions per GiB (plus idle-free waits), which
repeats from run to run; throughput is in guest time. Every result line
says which clock it ran on ("clock": "wall" or "icount-SHIFT"). It runs
under TCG even where KVM works (QEMU counts only what it emulates).
--cpus 1: one vCPU for everything (default 2: the receiver alone on vCPU 1).
--scale: how the cost grows instead of the main table: the zero-copy modes
(default iouring-zcrx and zcrx-rs) at the first buffer size, with the
sender's write size (4 KiB, 64 KiB, 1 MiB; one flow) and with the number of
flows on the queue (1, 8, 64; 64 KiB writes), each mode receiving all of a
run's flows in one thread (zcrx-rs: epoll + RECV per ready socket; io_uring
zcrx: one multishot RECV_ZC per flow), and with the number of bound queues
(1, 2, 4; 8 flows, 64 KiB writes) on a pair of 4-queue devices whose RSS
table spreads flows over the first 1, 2 or 4 queues (ethtool -X equal N):
zcrx-rs binds one context to all of them (ADD_QUEUE), io_uring zcrx has one
instance per queue (an area of its own each) and posts each flow's RECV_ZC
on the instance of the queue it arrives on (SO_INCOMING_NAPI_ID against
the queues' NAPI ids from netdev netlink). --series: only these series.
--rounds defaults to 3 here; the report adds the tables per series and an
SVG chart (.svg next to the results).
Every result line also splits the run's time: the receiver, the NAPI
threads of the receiving device and of the others, the sender's process;
the main report prints it per GiB ("where the time went"): on one vCPU the
parts add up to the run time, which sets the throughput.
--split: the receiver also measures its CPU time inside its receive system
calls (two clock_gettime calls around each: a diagnostic, not for the main
numbers); the report splits its CPU into inside and outside the calls, per
GiB and per buffer.
--profile: afterwards one more round (each mode at each buffer size and
MTU) with vCPU 1 sampled by perf (cpu-clock); the receiver's symbols next
to the results (profile-MODE[-BUFSIZE]-mtuMTU.txt).
--insn: afterwards one more round with every guest instruction counted by
a QEMU plugin (scripts/qemu-insn-plugin.c, built here against the header of
the host's QEMU, fetched from Debian's source archive once) between marks
the receiver sets around its measured window; scripts/insn-profile.py
prints instructions per 4 KiB per function and mode side by side
(insn-DATE.txt next to the results). Exact, not sampled, but for every
thread of the guest at once. Needs TCG (implies ZCRX_VM_ACCEL=tcg).
--rounds 0 with --insn or --profile: only that extra round, no table.
--module KO: load this zcrx_rs.ko (built for the fast kernel) instead of
the tree's. --module-b KO: a second build; a mode "zcrx-rs@b" (or
"zcrx-rs-copy@b") runs with it, taking turns with module A flow by flow in
the same VM, and the report gives its ratios to the mode without "@b" (a
change against its parent, side by side).
USAGE
}
module= module_b= profile= insn= icount= scale= series= split= rounds= cpus=2
modes_set= rcvlowat=$((1 << 20)) mtu= bytes=$((1 << 30)) modes="copy trunc iouring-zcrx zcrx-rs"
buf_sizes="4096 32768"
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) rounds=$2; shift ;;
	--bytes) bytes=$2; shift ;;
	--modes) modes=$2; modes_set=1; shift ;;
	--rcvlowat) rcvlowat=$2; shift ;;
	--mtu) mtu=$2; shift ;;
	--buf-sizes) buf_sizes=$2; shift ;;
	--profile) profile=1 ;;
	--insn) insn=1 ;;
	--scale) scale=1 ;;
	--split) split=1 ;;
	--series)
		series=$2; shift
		for x in $series; do
			case $x in write_size|flows|queues) ;; *) die "--series: no series $x (write_size, flows, queues)" ;; esac
		done ;;
	--cpus) cpus=$2; shift ;;
	--icount)
		icount=0
		case ${2:-} in [0-9]|10) icount=$2; shift ;; esac ;;
	--module) module=$(realpath "$2"); shift ;;
	--module-b) module_b=$(realpath "$2"); shift ;;
	-h|--help) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
	shift
done
[ -z "$series" ] || [ -n "$scale" ] || die "--series needs --scale"
if [ -n "$scale" ]; then
	rounds=${rounds:-3}
	[ -n "$modes_set" ] || modes="iouring-zcrx zcrx-rs"
	buf_sizes=${buf_sizes%% *}
fi
rounds=${rounds:-5}
B=$(build_dir fast)
module=${module:-$B/zcrx-module/rust/zcrx_rs.ko}
[ -f "$module" ] || die "no module at $module"
[ -z "$module_b" ] || [ -f "$module_b" ] || die "no module at $module_b"
case " $modes " in *@b*) [ -n "$module_b" ] || die "a mode with @b needs --module-b" ;; esac
for b in $buf_sizes; do
	case $b in
	*[!0-9]*|'') die "--buf-sizes: $b is not a byte count" ;;
	esac
	[ "$b" -ge 4096 ] && [ $((b & (b - 1))) = 0 ] || die "--buf-sizes: $b is not a power of two from 4096"
done
[ -n "$buf_sizes" ] || die "--buf-sizes: no buffer size"
D=$B/bench
mkdir -p "$D"
out=$D/${scale:+scale-}results-$(date -u +%Y%m%dT%H%M%SZ).jsonl
# The --insn plugin, built against the header of the host's QEMU (the
# Debian source package's, fetched once; no QEMU headers ship in a binary
# package). Prints its path.
insn_plugin() {
	local ver up dir so
	ver=$(dpkg-query -W -f='${Version}' qemu-system-x86 2>/dev/null) || die "--insn: qemu-system-x86 is not installed"
	up=${ver#*:}
	up=${up%-*}
	dir=$ZCRX_CACHE/qemu-plugin/$up
	so=$dir/insn-$(sha256sum "$ZCRX_TOP/scripts/qemu-insn-plugin.c" | cut -c1-12).so
	if [ ! -f "$dir/qemu-plugin.h" ]; then
		mkdir -p "$dir"
		msg "fetching qemu-plugin.h of QEMU $up (Debian's qemu_$up.orig.tar.xz, ~25 MB, once)"
		curl -fsSL "http://deb.debian.org/debian/pool/main/q/qemu/qemu_$up.orig.tar.xz" |
			tar -xJO --wildcards '*/include/qemu/qemu-plugin.h' > "$dir/qemu-plugin.h.tmp" ||
			die "--insn: could not fetch QEMU $up's plugin header"
		mv "$dir/qemu-plugin.h.tmp" "$dir/qemu-plugin.h"
	fi
	if [ ! -f "$so" ]; then
		cc -shared -fPIC -O2 -Wall -I"$dir" -o "$so" "$ZCRX_TOP/scripts/qemu-insn-plugin.c" ||
			die "--insn: the plugin does not build against QEMU $up"
	fi
	echo "$so"
}
stage_begin bench
rc=0
vm_opts=() clock=wall
if [ -n "$icount" ]; then
	# QEMU counts instructions only when it emulates them: no KVM.
	export ZCRX_VM_ACCEL=tcg
	vm_opts=(--qemu-opts "-icount shift=$icount,sleep=off,align=off")
	clock="icount-$icount"
fi
case $cpus in 1|2) ;; *) die "--cpus: 1 or 2" ;; esac
insn_prefix=
if [ -n "$insn" ]; then
	export ZCRX_VM_ACCEL=tcg
	insn_prefix=$D/insn-$(date -u +%Y%m%dT%H%M%SZ)
	plugin=$(insn_plugin)
	vm_opts=(--qemu-opts "${vm_opts[*]:+${vm_opts[1]} }-plugin $plugin,out=$insn_prefix")
fi
"$ZCRX_TOP/scripts/vm.sh" --name bench --timeout 7200 --cpus "$cpus" --rwdir "$D" "${vm_opts[@]}" -- \
	env BENCH_OUT="$out" BENCH_CLOCK="$clock" BENCH_SCALE="$scale" BENCH_SERIES="$series" BENCH_SPLIT="$split" BENCH_ROUNDS="$rounds" BENCH_BYTES="$bytes" BENCH_MODES="$modes" BENCH_PROFILE="$profile" BENCH_PROFILE_HZ="${BENCH_PROFILE_HZ:-}" BENCH_INSN="$insn_prefix" \
	BENCH_RCVLOWAT="$rcvlowat" BENCH_MTU="$mtu" BENCH_BUF_SIZES="$buf_sizes" \
	BENCH_MODULE="$module" BENCH_MODULE_B="$module_b" \
	bash "$ZCRX_TOP/scripts/guest-bench.sh" || rc=$?
stage_end
echo
if [ -n "$insn_prefix" ] && [ -s "$insn_prefix.windows" ]; then
	python3 "$ZCRX_TOP/scripts/insn-profile.py" "$insn_prefix" > "$insn_prefix.txt"
	msg "instruction counts per function: $insn_prefix.txt"
fi
if [ "$rounds" = 0 ] && [ -n "$insn$profile" ]; then
	# Only the extra round (--rounds 0 --insn or --profile).
	:
else
	[ -s "$out" ] || die "no results in $out (VM exit code $rc): see the output above"
	"$ZCRX_TOP/tools/target/release/zcrx-bench" --report "$out"
fi
[ "$rc" = 0 ] || die "the VM run failed (exit code $rc) after the runs above: see its output"
