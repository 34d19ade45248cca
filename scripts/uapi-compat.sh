#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# A program written against the first released uAPI header must still build
# with the current one, and every name that header gave must keep its
# offset, size and value.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() {
	cat <<USAGE
usage: scripts/uapi-compat.sh [--out DIR]

tools/uapi-compat/v1/linux/zcrx_rs.h is the first released header
(zcrx_rs 1.0), kept as it was. With cc -std=gnu11 -Wall -Wextra -Werror:
  1. tools/uapi-compat/v1-layout.c, which prints every struct size, field
     offset and size, and macro value of 1.0, is built against 1.0's header
     and against tools/include/uapi/linux/zcrx_rs.h: the outputs must be the
     same (also with -std=c11 -pedantic for the current header);
  2. tools/uapi-compat/v1-recv.c, a receiver written against 1.0 (reserved
     fields zeroed by name), is built against both; the one built against
     the current header is written to DIR/zcrx-uapi-v1-recv (default: the
     tools' release directory) for the VM test that runs it
     (uapi_v1_program_receives_zero_copy).
USAGE
}
out=$ZCRX_TOP/tools/target/release
while [ $# -gt 0 ]; do
	case $1 in
	--out) out=$2; shift ;;
	-h|--help) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
	shift
done

C=$ZCRX_TOP/tools/uapi-compat
CUR=$ZCRX_TOP/tools/include/uapi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CFLAGS=(-std=gnu11 -O2 -Wall -Wextra -Werror)

cc "${CFLAGS[@]}" -I"$C/v1" "$C/v1-layout.c" -o "$tmp/layout-v1"
cc "${CFLAGS[@]}" -I"$CUR" "$C/v1-layout.c" -o "$tmp/layout-cur"
cc -std=c11 -pedantic -Wall -Wextra -Werror -I"$CUR" "$C/v1-layout.c" -o "$tmp/layout-cur-c11"
"$tmp/layout-v1" > "$tmp/v1.txt"
"$tmp/layout-cur" > "$tmp/cur.txt"
"$tmp/layout-cur-c11" > "$tmp/cur-c11.txt"
if ! diff -u "$tmp/v1.txt" "$tmp/cur.txt" || ! diff -u "$tmp/v1.txt" "$tmp/cur-c11.txt"; then
	die "the current header moved, resized or changed a name of 1.0 (- 1.0, + now)"
fi
echo "1.0's $(grep -c '^field' "$tmp/v1.txt") fields, $(grep -c '^sizeof' "$tmp/v1.txt") structs and $(grep -c '^value' "$tmp/v1.txt") macros: same offsets, sizes and values in the current header"

cc "${CFLAGS[@]}" -I"$C/v1" "$C/v1-recv.c" -o "$tmp/recv-v1"
mkdir -p "$out"
cc "${CFLAGS[@]}" -I"$CUR" "$C/v1-recv.c" -o "$out/zcrx-uapi-v1-recv"
echo "v1-recv.c builds against 1.0's header and the current one: $out/zcrx-uapi-v1-recv"
