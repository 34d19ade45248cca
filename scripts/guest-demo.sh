#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Runs inside the VM for `make demo`: a TCP stream received zero-copy, into
# 4 KiB buffers (a page each) and then into 32 KiB buffers.
set -eu
B=${ZCRX_BUILD:?run through scripts/vm.sh}
TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$TOP/scripts/guest-lib.sh"
KO=${DEMO_MODULE:-$B/zcrx-module/rust/zcrx_rs.ko}
NC=$TOP/tools/target/release/zcrx-nc
MB=${DEMO_MB:-128}
AREA_MIB=64 # zcrx-nc's default --area
step() { printf '\n$ %s\n' "$*"; "$@"; }

echo "== a pair of netdevsim NICs in two network namespaces (nsa receives, nsb sends)"
nsim_up 1
echo "receiver: $NSIM_A in nsa (192.0.2.1), sender in nsb (192.0.2.2)"
echo "== header/data split on the receiver (ethtool netlink: tcp-data-split on, hds-thresh 0)"
hds_set nsa "$NSIM_A" on
ip netns exec nsa ethtool -g "$NSIM_A" | grep -i "data split"

echo "== the module"
step insmod "$KO"
step ls -l /dev/zcrx

head -c "${MB}M" /dev/urandom > /tmp/demo-in
# json_get KEY: the number KEY has in the JSON object in /tmp/demo-nc.json
json_get() { grep -o "\"$1\":[0-9]*" /tmp/demo-nc.json | cut -d: -f2; }
SUMMARY=

# One stream of $MB MiB over IPv4 to zcrx-nc with buffers of $1 bytes on
# port $2. IPv4 because netdevsim has TSO for it: the sender's 64 KiB
# segments cross the link whole and netdevsim's header split packs their
# payload into as few buffers as it fills, as a NIC with LRO/HW-GRO does
# (over IPv6 every 1428-byte segment would take a buffer of its own).
stream() {
	local bs=$1 port=$2 rx before after d p f total zc copied share bufs
	echo
	echo "== $MB MiB of random data, received with zcrx-nc into $bs-byte buffers (payload to a file, stats to stderr)"
	before=$(hds_stats 1 0)
	ip netns exec nsa "$NC" --dev "$NSIM_A" --queue 0 --port "$port" --buf-size "$bs" --json \
		> /tmp/demo-out 2> /tmp/demo-nc.err &
	rx=$!
	sleep 1
	ip netns exec nsb /usr/bin/python3 -c '
import socket, sys, time
s = socket.create_connection(("192.0.2.1", int(sys.argv[1])))
t = time.time()
with open("/tmp/demo-in", "rb") as f:
    while True:
        b = f.read(1 << 20)
        if not b: break
        s.sendall(b)
s.close()
print("sender: sent in %.2f s" % (time.time() - t))' "$port"
	wait $rx || { cat /tmp/demo-nc.err; return 1; }
	after=$(hds_stats 1 0)
	grep -v '^{' /tmp/demo-nc.err || true
	grep '^{' /tmp/demo-nc.err | tail -1 > /tmp/demo-nc.json
	echo "zcrx-nc statistics: $(cat /tmp/demo-nc.json)"

	echo "== checks"
	step sha256sum /tmp/demo-in /tmp/demo-out
	cmp /tmp/demo-in /tmp/demo-out && echo "payload: byte-exact ($(stat -c %s /tmp/demo-out) bytes)"
	d=$(( $(stat_get "$after" dma_bytes) - $(stat_get "$before" dma_bytes) ))
	p=$(( $(stat_get "$after" dma_packets) - $(stat_get "$before" dma_packets) ))
	f=$(( $(stat_get "$after" fallback_packets) - $(stat_get "$before" fallback_packets) ))
	echo "netdevsim rx queue 0: $d payload bytes DMA'd into the zcrx_rs area in $p packets, $f packets delivered unsplit"
	total=$(json_get bytes) zc=$(json_get zero_copy_bytes) copied=$(json_get copied_bytes)
	bufs=$(json_get refill_ok)
	share=$(awk -v z="$zc" -v t="$total" 'BEGIN { printf "%.1f%%", t ? 100 * z / t : 0 }')
	SUMMARY="$SUMMARY$(printf '%-13s %-11s %-20s %-8s %-12s %s' "$bs" "$total" "$zc ($share)" "$copied" "$d" "$bufs")
"
	rm -f /tmp/demo-out
}

stream 4096 5201
# Buffers larger than a page must each be one DMA range: hugetlbfs memory
# (the test kernel has no THP), so reserve the area's worth of huge pages.
HUGE_KB=$(awk '/^Hugepagesize:/ {print $2}' /proc/meminfo)
pages=$(( (AREA_MIB * 1024 + HUGE_KB - 1) / HUGE_KB ))
echo
echo "== huge pages for a ${AREA_MIB} MiB area of 32 KiB buffers"
printf '\n$ echo %s > /proc/sys/vm/nr_hugepages\n' "$pages"
echo "$pages" > /proc/sys/vm/nr_hugepages
grep -E '^(HugePages_Total|HugePages_Free|Hugepagesize)' /proc/meminfo
stream 32768 5202
rm -f /tmp/demo-in /tmp/demo-nc.err /tmp/demo-nc.json

echo
echo "== side by side (zcrx-nc's counts; netdevsim's DMA counter; refill entries: one per record, which is part of a buffer or, merged, several whole ones)"
printf '%-13s %-11s %-20s %-8s %-12s %s\n' "buffer bytes" "received" "zero-copy (share)" "copied" "DMA'd" "refills"
printf '%s' "$SUMMARY"

echo
echo "== teardown"
nsim_down
# The old page pool lets the module go once its last buffer is back
# (the page pool retries every second).
wait_module_idle
step rmmod zcrx_rs
[ ! -e /sys/module/zcrx_rs ] && echo "zcrx_rs unloaded cleanly"
echo 0 > /proc/sys/vm/nr_hugepages
