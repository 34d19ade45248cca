#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Runs inside the VM for `make demo`.
set -eu
B=${ZCRX_BUILD:?run through scripts/vm.sh}
KO=$B/zcrx-module/rust/zcrx_rs.ko
step() { printf '\n$ %s\n' "$*"; "$@"; }

step modinfo -F description "$KO"
step insmod "$KO"
for _ in $(seq 50); do [ -e /dev/zcrx ] && break; sleep 0.1; done
step ls -l /dev/zcrx
step cat /sys/class/misc/zcrx/dev /sys/module/zcrx_rs/refcnt
step sh -c 'dmesg | grep zcrx_rs'
step rmmod zcrx_rs
[ ! -e /sys/module/zcrx_rs ] && echo "zcrx_rs unloaded cleanly"
