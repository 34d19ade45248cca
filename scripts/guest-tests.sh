#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Runs inside the test VM (scripts/check.sh): the module's KUnit suites, then
# the selftest. Everything printed here is KTAP or a "# " diagnostic.
set -u
B=${ZCRX_BUILD:?run through scripts/vm.sh}
TOP=$(cd "$(dirname "$0")/.." && pwd)
KO=$B/zcrx-module/rust/zcrx_rs.ko
rc=0

# KUnit: the test build of the module carries its suites; they run on load
# (kunit.enable=1) and leave their KTAP in debugfs until the module goes.
echo "# kunit: loading $KO"
if insmod "$KO"; then
	found=0
	for r in /sys/kernel/debug/kunit/*/results; do
		[ -e "$r" ] || continue
		found=1
		cat "$r"
		grep -q '^not ok' "$r" && rc=1
	done
	[ $found -eq 1 ] || echo "# kunit: the module has no KUnit suites in this build"
	rmmod zcrx_rs || { echo "# kunit: rmmod zcrx_rs failed"; rc=1; }
else
	echo "not ok 1 kunit_module_load"
	rc=1
fi

"$TOP/tools/target/release/zcrx-selftest" --module "$KO" || rc=1
exit $rc
