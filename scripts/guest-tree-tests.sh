#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Copyright (C) 2026 The zcrx-rs developers.
#
# Runs inside the VM (scripts/tree-tests.sh starts it): the kernel tree's own
# selftests that run on netdevsim, once per netdevsim module given (the
# stock netdevsim of the release, built from the unpatched source against
# this kernel, and ours; or the pristine kernel's own), then the tree's
# zero-copy tests on ours. Each test is a path below
# tools/testing/selftests. Leaves LABEL-TEST.log and LABEL-TEST.rc (the exit
# status) in LOGDIR for each, and hw-TEST.dma (the payload bytes netdevsim
# DMA'd into provider buffers) for the zero-copy tests; the host compares
# them case by case (scripts/tree-compare.py). Prints one line per test and
# module; exits 1 only when it could not run the tests (a module that would
# not load or unload).
#
# Usage: guest-tree-tests.sh KSRC LOGDIR; LOGDIR/args holds "mod:LABEL:KO"
# lines (the netdevsim modules, in order; the one labelled "ours" also runs
# the zero-copy tests), then the tests, one per line ("hw:TEST" for a
# zero-copy test). "lazy:LABEL" (make check's quick run) runs module LABEL
# only for the tests that were not ok with "ours", which must come before
# it: the reference is needed only where ours is not ok (a case ok on ours
# passes whatever the reference did). Such a skipped run leaves
# LABEL-TEST.lazy instead of the .log and .rc.
set -u

KSRC=$1 LOG=$2
ST=$KSRC/tools/testing/selftests
PER_TEST=${ZCRX_TREE_TIMEOUT:-300}
mapfile -t ARGS <"$LOG/args"
MODS=() OURS= LAZY=
HW=()
set --
for a in "${ARGS[@]}"; do
	case $a in
	mod:ours:*) MODS+=("${a#mod:}"); OURS=${a#mod:ours:} ;;
	mod:*) MODS+=("${a#mod:}") ;;
	lazy:*) LAZY="$LAZY ${a#lazy:} " ;;
	hw:*) HW+=("${a#hw:}") ;;
	?*) set -- "$@" "$a" ;;
	esac
done
[ ${#HW[@]} -eq 0 ] || [ -n "$OURS" ] || { echo "tree-tests: zero-copy tests need mod:ours:KO" >&2; exit 1; }

# What the tests expect of a test machine: a current ethtool (bookworm's
# 6.1 lacks header split), from the cache (scripts/toolchain.sh).
sysctl -qw net.ipv6.conf.all.disable_ipv6=0 2>/dev/null
export PATH=${ZCRX_CACHE:?}/ethtool/root/usr/sbin:$PATH:/usr/sbin:/sbin
ethtool --version | grep -q 'version [7-9]' || { echo "tree-tests: no current ethtool in $ZCRX_CACHE/ethtool" >&2; exit 1; }

# The tree's NetdevSimDev runs `udevadm settle` after creating a device. The
# guest's udevd (systemd 252) sometimes closes the control connection right
# after the ping, and settle then fails with "Failed to wait for daemon to
# reply: Broken pipe" before the test has started (CI: stats.py with its 100
# queues, once). That is the VM's udevd, not the kernel under test: settle is
# retried when it says so (up to 3 times; each is counted and said at the
# end); any other failure is the test's, and every other udevadm command is
# the real one.
UDEVADM=$(command -v udevadm) || { echo "tree-tests: no udevadm" >&2; exit 1; }
WRAP=$(mktemp -d /tmp/tree-tests-bin.XXXXXX)
cat >"$WRAP/udevadm" <<EOF_WRAP
#!/bin/sh
[ "\$1" = settle ] || exec "$UDEVADM" "\$@"
try=1
while :; do
	err=\$("$UDEVADM" "\$@" 2>&1) && exit 0
	rc=\$?
	echo "\$err" >&2
	case \$err in *"Broken pipe"*) ;; *) exit \$rc ;; esac
	echo "udevadm settle: the daemon dropped the ping (exit \$rc, try \$try of 3)" >>"$LOG/udevadm-settle.failed"
	[ \$try -lt 3 ] || exit \$rc
	try=\$((try + 1))
	sleep 0.2
done
EOF_WRAP
chmod +x "$WRAP/udevadm"
export PATH=$WRAP:$PATH

# Runs "$@" in the background and gives it 60 s: a command that hangs in
# the kernel is reported (its stack and the kernel log), not waited for
# until the VM's timeout.
bounded() {
	local pid i
	"$@" 2>/dev/null &
	pid=$!
	for i in $(seq 1 300); do
		kill -0 "$pid" 2>/dev/null || { wait "$pid"; return; }
		sleep 0.2
	done
	echo "tree-tests: \`$*\` hangs; its stack:" >&2
	cat "/proc/$pid/stack" >&2 2>/dev/null
	for t in /proc/$pid/task/*/stack; do cat "$t" >&2 2>/dev/null; done
	dmesg | tail -40 >&2
	return 1
}

unload() {
	local i
	for d in /sys/bus/netdevsim/devices/netdevsim*; do
		[ -e "$d" ] || continue
		bounded sh -c "echo ${d##*netdevsim} > /sys/bus/netdevsim/del_device" || return 1
	done
	for i in $(seq 1 50); do
		grep -q '^netdevsim ' /proc/modules || return 0
		bounded rmmod netdevsim && return 0
		sleep 0.2
	done
	echo "tree-tests: cannot unload netdevsim" >&2
	return 1
}

# all_ok LOGBASE: the run's exit status was 0, its log is there, and its
# KTAP output (colours taken out, as tree-compare.py does) has no case that
# is not ok, skipped or an expected failure, and no fewer results than its
# plan announced
all_ok() {
	local ktap plan got
	[ "$(cat "$1.rc" 2>/dev/null)" = 0 ] && [ -f "$1.log" ] || return 1
	ktap=$(sed 's/\x1b\[[0-9;]*m//g' "$1.log")
	! echo "$ktap" | grep -qE '^not ok [0-9]+ |^ok [0-9]+ .*# (SKIP|XFAIL|TODO)' || return 1
	plan=$(echo "$ktap" | sed -n 's/^1\.\.\([0-9]\+\)$/\1/p' | head -1)
	got=$(echo "$ktap" | grep -cE '^(not )?ok [0-9]+ ')
	[ -z "$plan" ] || [ "$got" -ge "$plan" ]
}

# verdict RC LOGFILE: the progress line's result (the host compares the cases)
verdict() {
	local rc=$1 f=$2
	local v t
	case $rc in
	124) v=timeout ;;
	4) v=skip ;;
	0) v=ok ;;
	*) v="fail($rc)" ;;
	esac
	# python ksft tests count their cases: show them, so that a case that
	# changes shows even when the test's exit status does not
	t=$(grep -E '^# Totals:' "$f" | tail -1 | sed 's/^# Totals: //')
	if [ -n "$t" ]; then echo "$v [$t]"; else echo "$v"; fi
}

for m in "${MODS[@]}"; do
	mod=${m%%:*} ko=${m#*:}
	unload || exit 1
	insmod "$ko" || { echo "tree-tests: insmod $ko failed" >&2; exit 1; }
	for t in "$@"; do
		f=$LOG/$mod-$(echo "$t" | tr / _)
		dir=$ST/$(dirname "$t")
		case $LAZY in
		*" $mod "*)
			[ -f "$LOG/ours-$(echo "$t" | tr / _).rc" ] || { echo "tree-tests: lazy:$mod needs ours to run first" >&2; exit 1; }
			if all_ok "$LOG/ours-$(echo "$t" | tr / _)"; then
				echo "ok on ours" > "$f.lazy"
				printf '# %-8s %-45s %-40s\n' "$mod" "$t" "not run: every case ok on ours"
				continue
			fi ;;
		esac
		t0=$(date +%s)
		# the release tarball does not mark every test executable
		case $t in
		*.py) run=python3 ;;
		*) run=bash ;;
		esac
		(cd "$dir" && timeout -k 10 "$PER_TEST" $run "./$(basename "$t")") > "$f.log" 2>&1
		rc=$?
		echo "$rc" > "$f.rc"
		printf '# %-8s %-45s %-40s %4ss\n' "$mod" "$t" "$(verdict "$rc" "$f.log")" $(( $(date +%s) - t0 ))
		# a test that left devices behind must not spoil the next one
		unload >/dev/null 2>&1
		insmod "$ko" 2>/dev/null
	done
done
unload

# The tree's zero-copy tests need what stock netdevsim lacks (header split
# into provider memory, ntuple, RSS contexts): ours only, on a pair of
# 4-queue devices as a NIC test machine has them (NETIF + a remote in a
# network namespace, drivers/net/README.rst), and netdevsim's own count of
# the payload it DMA'd shows that the data did come zero-copy.
hw_pair() {
	local a b ai bi
	echo "1 1 4" > /sys/bus/netdevsim/new_device || return 1
	echo "2 1 4" > /sys/bus/netdevsim/new_device || return 1
	a=$(ls /sys/bus/netdevsim/devices/netdevsim1/net/)
	b=$(ls /sys/bus/netdevsim/devices/netdevsim2/net/)
	ip netns del tree-remote 2>/dev/null
	ip netns add tree-remote && ip link set "$b" netns tree-remote || return 1
	ai=$(cat "/sys/class/net/$a/ifindex")
	bi=$(ip netns exec tree-remote cat "/sys/class/net/$b/ifindex")
	(exec 3</run/netns/tree-remote 4</proc/self/ns/net &&
		echo "4:$ai 3:$bi" > /sys/bus/netdevsim/link_device) || return 1
	ip addr add 2001:db8::1/64 dev "$a" nodad && ip link set "$a" up &&
	ip -n tree-remote addr add 2001:db8::2/64 dev "$b" nodad &&
	ip -n tree-remote link set "$b" up && ip -n tree-remote link set lo up || return 1
	HW_IF=$a
}
# The tree's iou-zcrx takes any recvzc() error as fatal, and io_uring ends
# a multishot recvzc with -ENOSPC when the completion queue (1024 entries,
# one per received frag) is full. Its receiver checks every byte, slow
# under TCG, so TCP autotuning grows the window to several MiB and one
# drain of the socket can outgrow the queue (896 completions for one wait
# seen, ~1.4 MiB of 1.4 KiB segments). A test machine whose CPU keeps up
# never gets there: cap the receive buffer at 1 MiB (at most ~740
# completions per drain) while the zero-copy tests run.
rmem=$(sysctl -n net.ipv4.tcp_rmem)
sysctl -qw net.ipv4.tcp_rmem="4096 131072 1048576"
[ ${#HW[@]} -gt 0 ] && echo "# zero-copy tests: net.ipv4.tcp_rmem capped at 1 MiB (iou-zcrx's 1024-entry completion queue; see the script)"
for t in "${HW[@]}"; do
	unload >/dev/null 2>&1
	# DMA addresses 16 TiB above the physical ones (patch 56): io_uring
	# zcrx and devmem must hand the device what they mapped for it
	insmod "$OURS" dma_offset=0x100000000000 || { echo "tree-tests: insmod $OURS failed" >&2; exit 1; }
	f=$LOG/hw-$(echo "$t" | tr / _)
	t0=$(date +%s)
	if hw_pair; then
		(cd "$ST/$(dirname "$t")" && NETIF=$HW_IF LOCAL_V6=2001:db8::1 REMOTE_V6=2001:db8::2 \
			REMOTE_TYPE=netns REMOTE_ARGS=tree-remote \
			timeout -k 10 "$PER_TEST" python3 "./$(basename "$t")") > "$f.log" 2>&1
		rc=$?
	else
		echo "could not set up the netdevsim pair" > "$f.log"
		rc=1
	fi
	echo "$rc" > "$f.rc"
	v=$(verdict "$rc" "$f.log")
	dma=$(awk '{ b += $6 } END { print b + 0 }' /sys/kernel/debug/netdevsim/netdevsim1/ports/0/hds_stats 2>/dev/null)
	fb=$(awk '{ b += $10 } END { print b + 0 }' /sys/kernel/debug/netdevsim/netdevsim1/ports/0/hds_stats 2>/dev/null)
	echo "${dma:-0}" > "$f.dma"
	printf '# %-8s %-45s %-40s %4ss\n' ours "$t" "$v" $(( $(date +%s) - t0 ))
	echo "#          netdevsim DMA'd $dma payload bytes into provider buffers, $fb delivered unsplit"
	bounded ip netns del tree-remote
done
unload
sysctl -qw net.ipv4.tcp_rmem="$rmem"
[ -s "$LOG/udevadm-settle.failed" ] &&
	echo "# the VM's udevd: \`udevadm settle\` failed $(wc -l <"$LOG/udevadm-settle.failed") time(s) and was retried"
rm -rf "$WRAP"
exit 0
