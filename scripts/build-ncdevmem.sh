#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Build the kernel tree's own devmem TCP selftest program, unmodified.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() {
	cat <<USAGE
usage: scripts/build-ncdevmem.sh [--flavour fast|debug]

Compiles tools/testing/selftests/drivers/net/hw/ncdevmem.c from the cached
kernel tree, with the tree's C YNL library for the ethtool and netdev
families (tools/net/ynl, generated from Documentation/netlink/specs by the
tree's ynl_gen_c.py under Debian's python3 with python3-yaml and
python3-jsonschema), against that kernel's installed uAPI headers, into
\$ZCRX_CACHE/build/FLAVOUR/ncdevmem. The generator and its build write into
their tree, so they run in a scratch copy (\$ZCRX_CACHE/build/FLAVOUR/ynl).
Skipped when up to date.
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
KSRC=$KLINUX/src
SRC=$KSRC/tools/testing/selftests/drivers/net/hw/ncdevmem.c
OUT=$B/ncdevmem
Y=$B/ynl
[ -f "$SRC" ] || die "no kernel tree; run scripts/kernel.sh"
[ -d "$B/usr-headers/include" ] || die "kernel headers not installed in $B; run scripts/kernel.sh"
if [ "$OUT" -nt "$SRC" ] && [ "$OUT" -nt "$B/usr-headers/include/linux/netdev.h" ]; then
	exit 0
fi
# Debian's python3 and its packages, whatever else is first in PATH
/usr/bin/python3 -c 'import yaml, jsonschema' 2>/dev/null ||
	die "the YNL generator needs python3-yaml and python3-jsonschema (scripts/toolchain.sh installs them)"

# ynl_gen_c.py finds the tree's root by its MAINTAINERS file; the generated
# code includes the tree's uAPI headers.
rm -rf "$Y"
mkdir -p "$Y"
git -C "$KSRC" archive HEAD MAINTAINERS tools/net/ynl tools/scripts tools/include \
	Documentation/netlink include/uapi | tar -x -C "$Y"
log=$Y/build.log
PATH=/usr/bin:$PATH make -C "$Y/tools/net/ynl" -j"$(nproc)" GENS="ethtool netdev" RSTS="" \
	libynl.a >"$log" 2>&1 || { tail -20 "$log" >&2; die "building the tree's libynl failed (log: $log)"; }
gcc -O2 -o "$OUT" -isystem "$B/usr-headers/include" \
	-I"$Y/tools/net/ynl/lib" -I"$Y/tools/net/ynl/generated" \
	"$SRC" "$Y/tools/net/ynl/libynl.a" ||
	die "building ncdevmem failed (compiler output above)"
msg "built $OUT"
