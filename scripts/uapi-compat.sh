#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Programs written against a released uAPI header must still build with the
# current one, and every name a released header gave must keep its offset,
# size and value (but for the reviewed exceptions of tools/uapi-compat/moved.txt).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() {
	cat <<USAGE
usage: scripts/uapi-compat.sh [--out DIR]

tools/uapi-compat/v1/ and v1.4/ hold released headers as they were
(zcrx_rs 1.0, the first; 1.4, the last before 1.0's names came back).
For each, tools/uapi-compat/probe.py writes a C probe that prints every
struct size, member offset and size, and ZCRX_RS_ macro value the old
header names; it is built (cc -std=gnu11 -Wall -Wextra -Werror) against the
old header and the current one, and the outputs must be the same except
for the lines tools/uapi-compat/moved.txt lists with a reason. The probes
also build against the current header as C99 and C++17 with -pedantic
-Werror (the header is for C++ programs too). Then
tools/uapi-compat/v1-recv.c, a receiver written against 1.0 (reserved
fields zeroed by name), is built against 1.0's header and the current one;
the latter is written to DIR/zcrx-uapi-v1-recv (default: the tools'
release directory) for the VM test uapi_v1_program_receives_zero_copy.
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
bad=0

for rel in 1.0:v1 1.4:v1.4; do
	ver=${rel%%:*} dir=$C/${rel#*:}
	python3 "$C/probe.py" "$dir/linux/zcrx_rs.h" > "$tmp/probe-$ver.c"
	cc "${CFLAGS[@]}" -I"$dir" "$tmp/probe-$ver.c" -o "$tmp/old"
	cc "${CFLAGS[@]}" -I"$CUR" "$tmp/probe-$ver.c" -o "$tmp/cur" ||
		die "a name of $ver's header is gone from the current one (above)"
	cc -std=c99 -pedantic -Wall -Wextra -Werror -I"$CUR" "$tmp/probe-$ver.c" -o "$tmp/c99" ||
		die "the current header does not build as C99 -pedantic"
	g++ -x c++ -std=c++17 -pedantic -Wall -Wextra -Werror -Wno-invalid-offsetof \
		-I"$CUR" "$tmp/probe-$ver.c" -o "$tmp/cxx" ||
		die "the current header does not build as C++17 -pedantic"
	"$tmp/old" > "$tmp/old.txt"
	"$tmp/cur" > "$tmp/cur.txt"
	"$tmp/cxx" > "$tmp/cxx.txt"
	cmp -s "$tmp/cur.txt" "$tmp/cxx.txt" || { diff "$tmp/cur.txt" "$tmp/cxx.txt"; die "C and C++ disagree"; }
	moved=0
	while read -r kind name _; do
		if grep -qP "^\Q$ver $kind $name\E\t" "$C/moved.txt"; then
			moved=$((moved + 1))
		else
			echo "$ver's $kind $name changed (old: $(grep " $name " "$tmp/old.txt" | cut -d' ' -f3-), now: $(grep " $name " "$tmp/cur.txt" | cut -d' ' -f3-))"
			bad=1
		fi
	done < <(comm -23 <(sort "$tmp/old.txt") <(sort "$tmp/cur.txt"))
	echo "$ver's $(grep -c '^field' "$tmp/old.txt") fields, $(grep -c '^sizeof' "$tmp/old.txt") structs and $(grep -c '^value' "$tmp/old.txt") macros: the same now, but $moved reviewed in moved.txt; C99 and C++17 -pedantic build"
done
[ $bad -eq 0 ] || die "released names changed (not in tools/uapi-compat/moved.txt)"

cc "${CFLAGS[@]}" -I"$C/v1" "$C/v1-recv.c" -o "$tmp/recv-v1"
mkdir -p "$out"
cc "${CFLAGS[@]}" -I"$CUR" "$C/v1-recv.c" -o "$out/zcrx-uapi-v1-recv"
echo "v1-recv.c builds against 1.0's header and the current one: $out/zcrx-uapi-v1-recv"
