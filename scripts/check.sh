#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make check`: host unit tests, then one VM run with the selftest and the
# module's KUnit suites; prints a summary ending in "N passed, N failed".
set -uo pipefail
. "$(dirname "$0")/lib.sh"

usage() {
	cat <<USAGE
usage: scripts/check.sh [--flavour fast|debug] [--timeout SECONDS]

Expects the kernel, module and tools to be built (make check does that).
  1. cargo test of tools/ on the host
  2. scripts/vm.sh -- scripts/guest-tests.sh: KUnit suites of zcrx_rs and the
     zcrx-selftest KTAP run; the guest's kernel log is scanned for splats
Results: \$ZCRX_CACHE/build/FLAVOUR/check/
USAGE
}
flavour=fast timeout=1800
while [ $# -gt 0 ]; do
	case $1 in
	--flavour|--flavor) flavour=$2; shift ;;
	--timeout) timeout=$2; shift ;;
	-h|--help) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
	shift
done
B=$(build_dir "$flavour")
OUT=$B/check
mkdir -p "$OUT"
pass=0 fail=0 skip=0 bad=

# 1. host unit tests
stage_begin host-tests
cargo test --release --quiet --manifest-path "$ZCRX_TOP/tools/Cargo.toml" > "$OUT/host-tests.log" 2>&1
rc=$?
cat "$OUT/host-tests.log"
hp=$(sed -n 's/^test result: .* \([0-9]\+\) passed; \([0-9]\+\) failed.*/\1/p' "$OUT/host-tests.log" | paste -sd+ | bc)
hf=$(sed -n 's/^test result: .* \([0-9]\+\) passed; \([0-9]\+\) failed.*/\2/p' "$OUT/host-tests.log" | paste -sd+ | bc)
hp=${hp:-0} hf=${hf:-0}
if [ $rc -ne 0 ] && [ "$hf" -eq 0 ]; then hf=1; fi   # did not even build
pass=$((pass + hp)) fail=$((fail + hf))
[ "$hf" -eq 0 ] || bad="$bad host-tests"
stage_end

# 2. the VM: KUnit + selftest (KTAP on stdout)
stage_begin vm-tests
"$ZCRX_TOP/scripts/vm.sh" --flavour "$flavour" --name check --timeout "$timeout" \
	--append "kunit.enable=1 kunit.autorun=1" -- bash "$ZCRX_TOP/scripts/guest-tests.sh" | tee "$OUT/vm.log"
vrc=${PIPESTATUS[0]}
stage_end

# Every "ok"/"not ok" line of the guest's KTAP documents (subtests of KUnit
# suites are indented; count leaf results only at their own level).
vp=$(grep -E -c '^ *ok [0-9]+ ' "$OUT/vm.log" | head -1)
vs=$(grep -E -c '^ *ok [0-9]+ .*# SKIP' "$OUT/vm.log" | head -1)
vf=$(grep -E -c '^ *not ok [0-9]+ ' "$OUT/vm.log" | head -1)
vp=$((vp - vs))
pass=$((pass + vp)) fail=$((fail + vf)) skip=$((skip + vs))
[ "$vf" -eq 0 ] || bad="$bad vm-tests"
if [ "$vrc" -ne 0 ]; then
	[ "$vf" -gt 0 ] || { fail=$((fail + 1)); }
	bad="$bad vm-run(exit $vrc)"
fi
if ! grep -q '^# Totals:' "$OUT/vm.log"; then
	fail=$((fail + 1)); bad="$bad no-ktap-totals"
fi

echo
echo "==> summary ($flavour kernel): host unit tests $hp passed/$hf failed; VM $vp passed/$vf failed/$vs skipped"
[ -z "$bad" ] || echo "==> FAILED:$bad (logs in $OUT and $B/vm-logs)"
echo "$pass passed, $fail failed"
[ -z "$bad" ]
