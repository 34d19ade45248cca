#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make check-plants`: does `make check` fail when it must? Each file of
# scripts/plants/ is a patch that plants one defect `make check` has to
# catch (a splat in the tree-tests VM, a KUnit case that does not run, a
# test that skips on the kernel that must run it, a test whose data is
# copied while it is reported as zero-copy); its "expect:" lines are
# regular expressions (grep -E), each of which the run's output must
# match. A clean clone of HEAD gets every plant, `make check` runs in it
# (the kernel builds are shared with the cache: only the module and the
# tools are built again), and the run must fail with every expected line.
# Prints one line per plant and "N caught, N missed"; exits 1 if any plant
# went unseen or make check passed. It uses the cache's build and log
# directories as make check does (the planted module, check/*.log): run it
# alone, and run make check again afterwards.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

case ${1:-} in -h|--help)
	echo "usage: scripts/check-plants.sh [PLANT...]   (names of scripts/plants/*.patch; default: all)"
	exit 0 ;;
esac
PLANTS=$ZCRX_TOP/scripts/plants
if [ $# -gt 0 ]; then
	files=()
	for p in "$@"; do files+=("$PLANTS/${p%.patch}.patch"); done
else
	files=("$PLANTS"/*.patch)
fi

W=$ZCRX_CACHE/plants
rm -rf "$W"
mkdir -p "$W"
git clone -q "$ZCRX_TOP" "$W/clone"
git -C "$ZCRX_TOP" diff --quiet HEAD ||
	msg "note: $ZCRX_TOP has uncommitted changes; the plants go into a clone of HEAD"
for f in "${files[@]}"; do
	[ -f "$f" ] || die "no plant $f"
	git -C "$W/clone" apply "$f" || die "plant $(basename "$f") does not apply to HEAD"
	msg "planted $(basename "$f" .patch): $(sed -n 's/^plant: //p' "$f" | head -1)"
done

msg "make check with ${#files[@]} plants (log: $W/check.log)"
rc=0
make -C "$W/clone" --no-print-directory check >"$W/check.log" 2>&1 || rc=$?
tail -3 "$W/check.log"

caught=0 missed=0
for f in "${files[@]}"; do
	name=$(basename "$f" .patch)
	ok=1 shown=
	while IFS= read -r re; do
		if line=$(grep -E -m1 -- "$re" "$W/check.log"); then
			shown="$shown
    $line"
		else
			ok=
			shown="$shown
    (no line matches: $re)"
		fi
	done < <(sed -n 's/^expect: //p' "$f")
	if [ -n "$ok" ]; then
		caught=$((caught + 1)); echo "plant $name: caught$shown"
	else
		missed=$((missed + 1)); echo "plant $name: MISSED$shown"
	fi
done
if [ "$rc" = 0 ]; then
	echo "make check PASSED with the plants: it proves nothing it should"
	missed=$((missed + 1))
fi
echo "$caught caught, $missed missed"
[ "$missed" = 0 ]
