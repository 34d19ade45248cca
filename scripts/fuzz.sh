#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make fuzz`: the randomized uAPI driver (tools/selftest/src/fuzz.rs) on the
# debug kernel (KASAN, lockdep, kmemleak), then the end-of-run checks (live
# objects back to zero, pinned memory back, rmmod). The VM runner fails the
# run on any kernel splat. FUZZ_S seconds (default 600); FUZZ_SEED replays a
# run's choices (the seed is printed first).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
no_args "$@"

secs=${FUZZ_S:-600}
seed=${FUZZ_SEED:-}
B=$(build_dir debug)
KO=$B/zcrx-module/rust/zcrx_rs.ko
[ -f "$KO" ] || die "no debug module at $KO (make FLAVOUR=debug module)"
args=(--module "$KO" --fuzz-seconds "$secs")
[ -z "$seed" ] || args+=(--fuzz-seed "$seed")
msg "fuzzing for $secs s on the debug kernel${seed:+ (seed $seed)}"
"$ZCRX_TOP/scripts/vm.sh" --flavour debug --name fuzz --timeout $((secs + 900)) -- \
	"$ZCRX_TOP/tools/target/release/zcrx-selftest" "${args[@]}" fuzz_uapi
