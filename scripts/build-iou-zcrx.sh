#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Build the kernel tree's own io_uring zcrx selftest program, unmodified.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() {
	cat <<USAGE
usage: scripts/build-iou-zcrx.sh [--flavour fast|debug]

Compiles tools/testing/selftests/drivers/net/hw/iou-zcrx.c from the cached
kernel tree against that kernel's installed uAPI headers and the static
liburing from Debian's liburing-dev (scripts/toolchain.sh downloads it),
into \$ZCRX_CACHE/build/FLAVOUR/iou-zcrx. Skipped when up to date.
USAGE
}
flavour=fast
while [ $# -gt 0 ]; do
	case $1 in
	--flavour|--flavor) flavour=$2; shift ;;
	-h|--help) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
	shift
done
B=$(build_dir "$flavour")
SRC=$KLINUX/src/tools/testing/selftests/drivers/net/hw/iou-zcrx.c
URING=$ZCRX_CACHE/liburing/root/usr
OUT=$B/iou-zcrx
[ -f "$SRC" ] || die "no kernel tree; run scripts/kernel.sh"
[ -f "$URING/lib/x86_64-linux-gnu/liburing.a" ] || die "liburing-dev not unpacked; run scripts/toolchain.sh"
[ -d "$B/usr-headers/include" ] || die "kernel headers not installed in $B; run scripts/kernel.sh"
if [ "$OUT" -nt "$SRC" ] && [ "$OUT" -nt "$B/usr-headers/include/linux/io_uring.h" ]; then
	exit 0
fi
gcc -O2 -o "$OUT" -I"$B/usr-headers/include" -I"$URING/include" "$SRC" \
	"$URING/lib/x86_64-linux-gnu/liburing.a" ||
	die "building iou-zcrx failed (compiler output above)"
msg "built $OUT"
