#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make soak`: the long run (tools/selftest/src/soak.rs): byte-exact streams
# through two receivers while netdevsim's queues restart in every reset mode
# and one receiver comes and goes, unbinding and binding again; at the end
# the module's live objects and the pinned memory must be back to zero. The
# VM runner fails the run on any kernel splat. SOAK_S seconds (default 1800),
# on the debug kernel (SOAK_FLAVOUR=fast for more bytes per minute).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
no_args "$@"

secs=${SOAK_S:-1800}
fl=${SOAK_FLAVOUR:-${FLAVOUR:-debug}}
KO=$(build_dir "$fl")/zcrx-module/rust/zcrx_rs.ko
[ -f "$KO" ] || die "no $fl module at $KO (make FLAVOUR=$fl module)"
msg "soaking for $secs s on the $fl kernel"
"$ZCRX_TOP/scripts/vm.sh" --flavour "$fl" --name soak --timeout $((secs + 900)) -- \
	"$ZCRX_TOP/tools/target/release/zcrx-selftest" --module "$KO" --soak-seconds "$secs" \
	soak_streams_restarts_rebinds
