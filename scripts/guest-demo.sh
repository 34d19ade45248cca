#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Runs inside the VM for `make demo`: a TCP stream received zero-copy.
set -eu
B=${ZCRX_BUILD:?run through scripts/vm.sh}
TOP=$(cd "$(dirname "$0")/.." && pwd)
. "$TOP/scripts/guest-lib.sh"
KO=$B/zcrx-module/rust/zcrx_rs.ko
NC=$TOP/tools/target/release/zcrx-nc
MB=${DEMO_MB:-128}
step() { printf '\n$ %s\n' "$*"; "$@"; }

echo "== a pair of netdevsim NICs in two network namespaces (nsa receives, nsb sends)"
nsim_up 1
echo "receiver: $NSIM_A in nsa (2001:db8::1), sender in nsb (2001:db8::2)"
echo "== header/data split on the receiver (ethtool netlink: tcp-data-split on, hds-thresh 0)"
hds_set nsa "$NSIM_A" on
ip netns exec nsa ethtool -g "$NSIM_A" | grep -i "data split"

echo "== the module"
step insmod "$KO"
step ls -l /dev/zcrx

echo "== $MB MiB of random data, received with zcrx-nc (payload to a file, stats to stderr)"
head -c "${MB}M" /dev/urandom > /tmp/demo-in
before=$(hds_stats 1 0)
ip netns exec nsa "$NC" --dev "$NSIM_A" --queue 0 --port 5201 > /tmp/demo-out &
rx=$!
sleep 1
ip netns exec nsb /usr/bin/python3 -c '
import socket, time
s = socket.create_connection(("2001:db8::1", 5201))
t = time.time()
with open("/tmp/demo-in", "rb") as f:
    while True:
        b = f.read(1 << 20)
        if not b: break
        s.sendall(b)
s.close()
print("sender: sent in %.2f s" % (time.time() - t))'
wait $rx
after=$(hds_stats 1 0)

echo "== checks"
step sha256sum /tmp/demo-in /tmp/demo-out
cmp /tmp/demo-in /tmp/demo-out && echo "payload: byte-exact ($(stat -c %s /tmp/demo-out) bytes)"
d=$(( $(stat_get "$after" dma_bytes) - $(stat_get "$before" dma_bytes) ))
f=$(( $(stat_get "$after" fallback_packets) - $(stat_get "$before" fallback_packets) ))
echo "netdevsim rx queue 0: $d payload bytes DMA'd into the zcrx_rs area, $f packets delivered unsplit"
rm -f /tmp/demo-in /tmp/demo-out

echo "== teardown"
nsim_down
# The old page pool lets the module go once its last buffer is back
# (the page pool retries every second).
wait_module_idle
step rmmod zcrx_rs
[ ! -e /sys/module/zcrx_rs ] && echo "zcrx_rs unloaded cleanly"
