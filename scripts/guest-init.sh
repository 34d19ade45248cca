#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Runs inside the guest (scripts/vm.sh): basic set-up, then the command.
# Its stderr goes to stdout so the host's kernel-log file holds only the
# kernel console.
exec 2>&1
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
echo "# zcrx-guest: $(uname -r), $(nproc) vCPUs, $(awk '/MemTotal/ {print $2 / 1024 " MiB"}' /proc/meminfo)"
"$@"
rc=$?
# If kmemleak is there (debug flavour), let it report into the kernel log.
if [ -w /sys/kernel/debug/kmemleak ]; then
	echo scan > /sys/kernel/debug/kmemleak
	sleep 1
	echo scan > /sys/kernel/debug/kmemleak
fi
echo "zcrx-guest: exit $rc" > /dev/kmsg
exit $rc
