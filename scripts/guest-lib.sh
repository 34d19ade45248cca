# SPDX-License-Identifier: GPL-2.0
# Guest-side helpers (sourced inside the test VM): a pair of netdevsim
# devices in two network namespaces, header split, counters.
#
#   nsim_up NQUEUES   creates nsa/eth (192.0.2.1, 2001:db8::1) linked to
#                     nsb/eth (192.0.2.2, 2001:db8::2); sets NSIM_A/NSIM_B
#                     (names), NSIM_A_IDX/NSIM_B_IDX (ifindex in their ns)
#   nsim_down         removes both devices and namespaces
#   hds_set NS DEV on|off   tcp-data-split (+ hds-thresh 0) through ethtool
#                     netlink, with the kernel tree's YNL client
#   hds_stats ID [QUEUE]  netdevsim's header-split counters of a queue

: "${ZCRX_BUILD:?run through scripts/vm.sh}"
: "${ZCRX_CACHE:?run through scripts/vm.sh}"
KSRC=$ZCRX_BUILD/source   # the booted kernel's tree (7.2 or 7.3)
YNL="/usr/bin/python3 $KSRC/tools/net/ynl/pyynl/cli.py --no-schema"

# netdevsim puts its DMA addresses this far above the physical ones (its
# dma_offset parameter, series patch 56): above all of the guest's memory,
# so that a physical address taken for a DMA address finds no memory
NSIM_DMA_OFFSET=0x100000000000

nsim_load() {
	[ -d /sys/bus/netdevsim ] && return 0
	insmod "$ZCRX_BUILD/drivers/net/netdevsim/netdevsim.ko" dma_offset=$NSIM_DMA_OFFSET
}

# nsim_dev ID: the netdev name of netdevsim device ID's single port
nsim_dev() {
	local d
	for _ in $(seq 50); do
		d=$(ls "/sys/bus/netdevsim/devices/netdevsim$1/net/" 2>/dev/null | head -1)
		[ -n "$d" ] && { echo "$d"; return 0; }
		sleep 0.1
	done
	echo "netdevsim$1 has no netdev" >&2
	return 1
}

nsim_up() {
	local q=${1:-1} fa fb
	nsim_load || return 1
	ip netns add nsa && ip netns add nsb || return 1
	echo "1 1 $q" > /sys/bus/netdevsim/new_device || return 1
	echo "2 1 $q" > /sys/bus/netdevsim/new_device || return 1
	# no `udevadm settle`: vm.sh boots with net.ifnames=0, nothing renames
	NSIM_A=$(nsim_dev 1) && NSIM_B=$(nsim_dev 2) || return 1
	ip link set "$NSIM_A" netns nsa && ip link set "$NSIM_B" netns nsb || return 1
	NSIM_A_IDX=$(ip netns exec nsa cat "/sys/class/net/$NSIM_A/ifindex")
	NSIM_B_IDX=$(ip netns exec nsb cat "/sys/class/net/$NSIM_B/ifindex")
	exec {fa}</run/netns/nsa {fb}</run/netns/nsb
	echo "$fa:$NSIM_A_IDX $fb:$NSIM_B_IDX" > /sys/bus/netdevsim/link_device || return 1
	exec {fa}<&- {fb}<&-
	ip -n nsa addr add 192.0.2.1/24 dev "$NSIM_A"
	ip -n nsb addr add 192.0.2.2/24 dev "$NSIM_B"
	ip -n nsa -6 addr add 2001:db8::1/64 dev "$NSIM_A" nodad
	ip -n nsb -6 addr add 2001:db8::2/64 dev "$NSIM_B" nodad
	ip -n nsa link set "$NSIM_A" up && ip -n nsb link set "$NSIM_B" up
	ip -n nsa link set lo up && ip -n nsb link set lo up
	export NSIM_A NSIM_B NSIM_A_IDX NSIM_B_IDX
}

nsim_down() {
	[ -e /sys/bus/netdevsim/devices/netdevsim1 ] && echo 1 > /sys/bus/netdevsim/del_device
	[ -e /sys/bus/netdevsim/devices/netdevsim2 ] && echo 2 > /sys/bus/netdevsim/del_device
	ip netns del nsa 2>/dev/null
	ip netns del nsb 2>/dev/null
	return 0
}

hds_set() {
	local ns=$1 dev=$2 mode idx
	case $3 in on) mode=enabled ;; off) mode=disabled ;; *) return 2 ;; esac
	idx=$(ip netns exec "$ns" cat "/sys/class/net/$dev/ifindex")
	ip netns exec "$ns" $YNL --spec "$KSRC/Documentation/netlink/specs/ethtool.yaml" \
		--do rings-set --json "{\"header\":{\"dev-index\":$idx},\"tcp-data-split\":\"$mode\",\"hds-thresh\":0}" >/dev/null
}

# hds_stats ID [QUEUE]: "dma_packets N dma_bytes N fallback_packets N
# fallback_bytes N" of netdevsim device ID (1: nsa side, 2: nsb side)
hds_stats() {
	grep -h "^queue ${2:-0} " "/sys/kernel/debug/netdevsim/netdevsim$1/ports/0/hds_stats" |
		cut -d' ' -f3-
}

# stat_get "LINE" KEY: value of KEY in a "key value key value" line
stat_get() {
	echo "$1" | tr ' ' '\n' | awk -v k="$2" 'f {print; exit} $0 == k {f = 1}'
}

# Raises NET_RX on every CPU with one loopback datagram each. skbs freed on
# a CPU other than the one that allocated them wait on that CPU's
# deferred-free list (skb_attempt_defer_free) until its next net_rx_action,
# and with them the buffers they hold and the page pool that lends them; on
# a quiet VM nothing else runs it.
kick_softirqs() {
	local c
	for c in $(seq 0 $(($(nproc) - 1))); do
		taskset -c "$c" bash -c 'echo kick > /dev/udp/127.0.0.1/9' 2>/dev/null || true
	done
}

# Waits up to 20 s for zcrx_rs to have no users (page pools included; a
# page pool retries its release every second). Prints how long it took.
wait_module_idle() {
	local i
	for i in $(seq 40); do
		[ "$(cat /sys/module/zcrx_rs/refcnt)" = 0 ] && break
		[ $((i % 4)) = 0 ] && kick_softirqs
		sleep 0.5
	done
	echo "zcrx_rs refcnt $(cat /sys/module/zcrx_rs/refcnt) (waited $(((i - 1) / 2)) s for page pools to let go)"
}
