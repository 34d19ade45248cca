#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make fuzz-net`: the remote packet fuzzer (tools/selftest/src/remote.rs)
# on the debug kernel (KASAN, lockdep, kmemleak): a hostile peer crafts
# frames against a host whose netdevsim queue has a provider bound (a
# third of the time each: zcrx-rs, io_uring zcrx, devmem TCP), while
# valid connections must stay byte-exact. The VM runner fails the run on
# any kernel splat. FUZZ_NET_S seconds (default 600); FUZZ_NET_SEED
# replays the attacker's choices (the seed is printed first);
# FUZZ_NET_FLAVOUR=fast for the fast kernel. FUZZ_NET_MIN: the run fails
# if a packet class was sent fewer times (default: 1000 for runs of
# 1800 s or more, the remote-robustness bar; 0, no minimum, below).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
no_args "$@"

secs=${FUZZ_NET_S:-600}
seed=${FUZZ_NET_SEED:-}
flavour=${FUZZ_NET_FLAVOUR:-debug}
min=${FUZZ_NET_MIN:-$([ "$secs" -ge 1800 ] && echo 1000 || echo 0)}
B=$(build_dir "$flavour")
KO=$B/zcrx-module/rust/zcrx_rs.ko
[ -f "$KO" ] || die "no $flavour module at $KO (make FLAVOUR=$flavour module)"
args=(--module "$KO" --fuzz-net-seconds "$secs" --fuzz-net-min-per-class "$min")
[ -z "$seed" ] || args+=(--fuzz-net-seed "$seed")
msg "remote fuzzing for $secs s on the $flavour kernel${seed:+ (seed $seed)}"
"$ZCRX_TOP/scripts/vm.sh" --flavour "$flavour" --name fuzz-net --timeout $((secs + 900)) -- \
	"$ZCRX_TOP/tools/target/release/zcrx-selftest" "${args[@]}" fuzz_remote
