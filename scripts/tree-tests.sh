#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make tree-tests`: does our netdevsim still behave like the stock one? Runs
# the kernel tree's own selftests that use netdevsim (drivers/net/netdevsim,
# drivers/net/*.py, and the net/ tests that exercise page pools, queue
# management and netkit queue leasing) in one VM, first with the release's
# stock netdevsim (drivers/net/netdevsim of the unpatched source, built as a
# module against our kernel: the only difference is netdevsim itself), then
# with ours, and compares them case by case (scripts/tree-compare.py): any
# case whose result differs fails, and so does a case that is not ok on
# both unless scripts/tree-tests-expected.txt (a reviewed list) allows it.
# With TREE_BASELINE=1 the same tests run first on the pristine release
# kernel (no series) as a third column. TREE_TESTS="a b" picks tests (paths
# below tools/testing/selftests); TREE_QUICK=1 runs the short list `make
# check` uses. TREE_LAZY=1 (make check) runs ours first and the stock
# netdevsim only for the tests not ok on ours: a case ok on ours passes
# whatever stock did, so only the not-ok ones need the reference (it
# halves the stage when everything passes).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
no_args "$@"

fl=${FLAVOUR:-fast}
B=$(build_dir "$fl")
SRC=$KLINUX/src
[ -f "$B/drivers/net/netdevsim/netdevsim.ko" ] || die "no $fl kernel build at $B (make FLAVOUR=$fl kernel)"
git -C "$SRC" rev-parse -q --verify pristine >/dev/null || die "no pristine tag in $SRC (scripts/kernel.sh source)"

# Short enough for make check (about 3 min per module on the fast kernel):
# the tests that touch what our netdevsim patches change (the peer data
# path, header split, queue restarts, page pools, qstats). ping.py (the
# peer path with XDP programs, 50 s) is in the full list only.
QUICK="drivers/net/netdevsim/peer.sh
drivers/net/netdevsim/ethtool-features.sh
drivers/net/hds.py
drivers/net/queues.py
drivers/net/stats.py
net/nl_netdev.py
hw:drivers/net/hw/iou-zcrx.py
hw:drivers/net/hw/devmem.py"
# hw: the tree's io_uring zcrx and devmem TCP tests, ours only (stock
# netdevsim cannot run them).
FULL="$QUICK
drivers/net/ping.py
drivers/net/netdevsim/ethtool-coalesce.sh
drivers/net/netdevsim/ethtool-pause.sh
drivers/net/netdevsim/ethtool-fec.sh
drivers/net/netdevsim/tc-mq-visibility.sh
drivers/net/netdevsim/devlink_in_netns.sh
drivers/net/napi_threaded.py
drivers/net/ring_reconfig.py
drivers/net/netpoll_basic.py
net/nk_qlease.py"
if [ -n "${TREE_TESTS:-}" ]; then
	tests=$TREE_TESTS
elif [ "${TREE_QUICK:-0}" = 1 ]; then
	tests=$QUICK
else
	tests=$FULL
fi

# The zero-copy tests run their helper from next to the script: put ours
# there (scripts/build-iou-zcrx.sh and build-ncdevmem.sh, the tree's
# iou-zcrx.c and ncdevmem.c).
if echo "$tests" | grep -q 'hw/iou-zcrx.py'; then
	[ -x "$B/iou-zcrx" ] || die "no $B/iou-zcrx (make FLAVOUR=$fl iou-zcrx)"
	cp "$B/iou-zcrx" "$SRC/tools/testing/selftests/drivers/net/hw/iou-zcrx"
fi
if echo "$tests" | grep -q 'hw/devmem.py'; then
	[ -x "$B/ncdevmem" ] || die "no $B/ncdevmem (make FLAVOUR=$fl ncdevmem)"
	cp "$B/ncdevmem" "$SRC/tools/testing/selftests/drivers/net/hw/ncdevmem"
fi

# The XDP cases load the tree's xdp_dummy.bpf.o from net/lib, which the
# release tarball does not ship: build it as the selftests' Makefile would
# (clang's BPF target, the tree's libbpf headers, bpf_helper_defs.h
# generated from the tree's uapi bpf.h).
bpfinc=$B/tree-bpf/include
mkdir -p "$bpfinc/bpf"
cp "$SRC/tools/lib/bpf/bpf_helpers.h" "$bpfinc/bpf/"
python3 "$SRC/scripts/bpf_doc.py" --header --file "$SRC/tools/include/uapi/linux/bpf.h" \
	>"$bpfinc/bpf/bpf_helper_defs.h" || die "scripts/bpf_doc.py failed"
clang-19 -O2 -g -target bpf -I"$bpfinc" -I"$SRC/tools/include/uapi" \
	-c "$SRC/tools/testing/selftests/net/lib/xdp_dummy.bpf.c" \
	-o "$SRC/tools/testing/selftests/net/lib/xdp_dummy.bpf.o" ||
	die "the tree's xdp_dummy.bpf.c did not build"

# queues.py's check_xsk runs the tree's xdp_helper (an AF_XDP socket on a
# queue), which the tarball does not ship built either: plain C against
# the kernel's headers.
gcc -O2 -Wall -I"$B/usr-headers/include" -I"$SRC/tools/testing/selftests/net/lib" \
	"$SRC/tools/testing/selftests/net/lib/xdp_helper.c" \
	-o "$SRC/tools/testing/selftests/net/lib/xdp_helper" ||
	die "the tree's xdp_helper.c did not build"

stock=$B/nsim-stock
msg "building the stock netdevsim of $(cat "$KLINUX/deb-version") against the $fl kernel"
rm -rf "$stock"
mkdir -p "$stock"
git -C "$SRC" archive pristine drivers/net/netdevsim | tar -x -C "$stock"
kbuild_env
make -s -C "$B" M="$stock/drivers/net/netdevsim" CONFIG_NETDEVSIM=m modules >"$stock/build.log" 2>&1 ||
	{ tail -20 "$stock/build.log" >&2; die "stock netdevsim did not build (log: $stock/build.log)"; }

logs=$B/tree-tests-logs
rm -rf "$logs"
mkdir -p "$logs"
# shellcheck disable=SC2086 # one test per line, whatever separated them
plain=$(printf "%s\n" $tests | grep -v '^hw:' || true)
# shellcheck disable=SC2086
hw=$(printf "%s\n" $tests | sed -n 's/^hw://p')
n=$(echo "$tests" | wc -w)
labels=stock,ours

# The baseline (TREE_BASELINE=1, make tree-tests' default): the same tests
# on the release without the series (scripts/kernel.sh --flavour
# pristine, the fast flavour's options) with its own netdevsim, in a VM of
# its own. Stock netdevsim on our kernel vs the pristine kernel then shows
# what the core patches change; stock vs ours what our netdevsim changes.
vmrc=0
if [ "${TREE_BASELINE:-0}" = 1 ] && [ -n "$plain" ]; then
	"$ZCRX_TOP/scripts/kernel.sh" --flavour pristine
	PB=$(build_dir pristine)
	printf "mod:pristine:%s\n%s\n" "$PB/drivers/net/netdevsim/netdevsim.ko" "$plain" >"$logs/args"
	msg "running $(echo "$plain" | wc -l) tree selftests on the pristine $(cat "$KLINUX/deb-version") kernel"
	"$ZCRX_TOP/scripts/vm.sh" --flavour pristine --name tree-tests-pristine \
		--timeout $(($(echo "$plain" | wc -l) * 150 + 300)) \
		--rwdir "$logs" -- bash "$ZCRX_TOP/scripts/guest-tree-tests.sh" "$SRC" "$logs" || vmrc=$?
	labels=pristine,stock,ours
fi

# The list goes by file: the guest's command line travels on the kernel's.
lazy=()
if [ "${TREE_LAZY:-0}" = 1 ]; then
	msg "running $n tree selftests with our netdevsim, then with the stock one where ours is not ok"
	lazy=(--lazy stock)
	order="mod:ours:$B/drivers/net/netdevsim/netdevsim.ko
mod:stock:$stock/drivers/net/netdevsim/netdevsim.ko
lazy:stock"
else
	msg "running $n tree selftests with the stock netdevsim, then with ours"
	order="mod:stock:$stock/drivers/net/netdevsim/netdevsim.ko
mod:ours:$B/drivers/net/netdevsim/netdevsim.ko"
fi
{
	echo "$order"
	# shellcheck disable=SC2086 # one test per line, whatever separated them
	printf "%s\n" $tests
} >"$logs/args"
"$ZCRX_TOP/scripts/vm.sh" --flavour "$fl" --name tree-tests --timeout $((n * 2 * 150 + 300)) \
	--rwdir "$logs" -- bash "$ZCRX_TOP/scripts/guest-tree-tests.sh" "$SRC" "$logs" || vmrc=$?

# What each zero-copy test sends, so what netdevsim must have DMA'd into
# provider buffers at least (retransmissions may add some):
#   iou-zcrx.py: test_zcrx single and rss send SEND_SIZE (2 MiB) each,
#     test_zcrx_oneshot single and rss 16 KiB each (-z 16384),
#     test_zcrx_large_chunks 2 MiB: 6324224 bytes;
#   devmem.py: check_rx 1 KiB, check_rx_hds one payload of each of 1, 8,
#     16, ... 8192 bytes (16377): 17401 bytes (check_tx and check_tx_chunks
#     send from the dmabuf: nothing is received into one).
declare -A HW_BYTES=([drivers/net/hw/iou-zcrx.py]=6324224 [drivers/net/hw/devmem.py]=17401)
cmp=(python3 "$ZCRX_TOP/scripts/tree-compare.py" "$logs" --labels "$labels"
	--expected "$ZCRX_TOP/scripts/tree-tests-expected.txt" "${lazy[@]}" --tests)
# shellcheck disable=SC2206 # one test per line, no spaces
cmp+=($plain)
if [ -n "$hw" ]; then
	cmp+=(--hw)
	for t in $hw; do
		[ -n "${HW_BYTES[$t]:-}" ] || die "no payload size known for the zero-copy test $t (HW_BYTES in $0)"
		cmp+=("$t=${HW_BYTES[$t]}")
	done
fi
crc=0
"${cmp[@]}" || crc=$?
# A VM that failed (a splat: vm.sh exits 3; a timeout; a panic) fails the
# run even when every case agreed.
[ "$vmrc" = 0 ] || echo "tree-tests: a VM failed (exit $vmrc)" >&2
# vm.sh's status goes out as it is (3: a splat; 124: a timeout)
[ "$crc" = 0 ] || exit 1
exit "$vmrc"
