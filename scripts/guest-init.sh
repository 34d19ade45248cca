#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Runs inside the guest (scripts/vm.sh): basic set-up, then the command.
# Its stderr goes to stdout so the host's kernel-log file holds only the
# kernel console.
exec 2>&1
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
# The guest's udevd (the host's rules) renames a new netdev (eth1 ->
# eni2np1) whenever it gets to its uevent, which can be after `udevadm
# settle` has returned: a test that had just read the name then failed with
# "Cannot find device eth1" (CI, about 1 run in 25). netdevsim netdevs keep
# their kernel names here (and the MAC they were given). /etc is the
# guest's own overlay.
if [ -d /run/udev ] && mkdir -p /etc/systemd/network 2>/dev/null; then
	printf '[Match]\nDriver=netdevsim\n\n[Link]\nNamePolicy=keep\nMACAddressPolicy=none\n' \
		>/etc/systemd/network/00-zcrx-netdevsim.link
	udevadm control --reload 2>/dev/null
fi
echo "# zcrx-guest: $(uname -r), $(nproc) vCPUs, $(awk '/MemTotal/ {print $2 / 1024 " MiB"}' /proc/meminfo)"
"$@"
rc=$?
# If kmemleak is there (debug flavour), let it report into the kernel log;
# it reports no object younger than 5 s, so the second scan waits 6 s.
if [ -w /sys/kernel/debug/kmemleak ]; then
	echo scan > /sys/kernel/debug/kmemleak
	sleep 6
	echo scan > /sys/kernel/debug/kmemleak
fi
echo "zcrx-guest: exit $rc" > /dev/kmsg
exit $rc
