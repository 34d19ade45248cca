#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Work on the kernel patch series in a git worktree of the cached tree.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() {
	cat <<USAGE
usage: scripts/kpatch.sh dev|export|checkpatch|versions

  dev         create (or reset) the worktree \$ZCRX_CACHE/linux/dev, branch
              'dev' = pristine 7.2 + scripts/patches/series applied with git am.
              Edit and commit there (one concern per commit). New files need
              \`git add -f\`: Debian's .gitignore ignores the top level.
  export      write dev's commits since 'pristine' to scripts/patches/ with
              git format-patch and rewrite the series file
  checkpatch  run the tree's scripts/checkpatch.pl --strict on every patch;
              fails if any reports an error, warning or check
  versions    check that the series applies, in order and without fuzz, to
              every linux-source-7.2 in KERNEL_DEB_VERSIONS (scripts/lib.sh):
              downloads each .deb (private apt config, see toolchain.sh) into
              \$ZCRX_CACHE/versions and unpacks only the files the series touches
USAGE
}
SRC=$ZCRX_CACHE/linux/src
DEV=$ZCRX_CACHE/linux/dev
P=$ZCRX_TOP/scripts/patches
PATCHES=$(grep -v -e '^#' -e '^$' "$P/series")

# Applies the series to the linux-source-7.2 .deb of version $1.
check_version() {
	local v=$1 d=$ZCRX_CACHE/versions/$1 files p ok=0
	mkdir -p "$d"
	if ! ls "$d"/linux-source-7.2_*.deb >/dev/null 2>&1; then
		(cd "$d" && apt_x download "linux-source-7.2=$v" >/dev/null) ||
			{ warn "$v: cannot download linux-source-7.2=$v (run scripts/toolchain.sh first?)"; return 1; }
	fi
	files=$(cd "$P" && cat $PATCHES | sed -n 's|^--- a/||p' | sort -u)
	rm -rf "$d/tree" && mkdir -p "$d/tree"
	dpkg-deb --fsys-tarfile "$d"/linux-source-7.2_*.deb | tar -xO ./usr/src/linux-source-7.2.tar.xz |
		tar -xJ -C "$d/tree" --strip-components=1 $(printf 'linux-source-7.2/%s ' $files) ||
		{ warn "$v: cannot unpack the files the series touches"; return 1; }
	for p in $PATCHES; do
		if git -C "$d/tree" apply "$P/$p" 2>"$d/err"; then
			ok=$((ok + 1))
		else
			warn "$v: $p does not apply: $(head -3 "$d/err")"
			return 1
		fi
	done
	msg "$v: all $ok patches apply"
}
case ${1:-} in
versions)
	rc=0
	for v in $KERNEL_DEB_VERSIONS; do check_version "$v" || rc=1; done
	exit $rc
	;;
esac
[ -d "$SRC/.git" ] || die "no kernel tree yet; run scripts/kernel.sh source"

case ${1:-} in
dev)
	if [ ! -d "$DEV" ]; then
		git -C "$SRC" worktree add -q -f -B dev "$DEV" pristine
	else
		git -C "$DEV" checkout -q -f -B dev pristine
	fi
	git -C "$DEV" config user.name "zcrx-rs developers"
	git -C "$DEV" config user.email "zcrx-rs@users.noreply.example"
	echo "$PATCHES" | sed "s|^|$P/|" | xargs -r git -C "$DEV" am -q
	msg "dev tree at $DEV: $(git -C "$DEV" rev-list --count pristine..dev) patches on pristine"
	;;
export)
	# Debian's tarball .gitignore ignores everything at the top level (/*),
	# so a plain `git add -A` silently skips new files: catch that here.
	stray=$(git -C "$DEV" status --porcelain --ignored | sed -n 's/^!! //p' | grep -v -E '(^|/)\.|\.o$|\.cmd$' || true)
	[ -z "$stray" ] || die "untracked new files in $DEV (commit them with git add -f):
$stray"
	rm -f "$P"/*.patch
	# abbreviated blob ids of a fixed length: the default grows with the
	# number of objects, and would rewrite every patch on another machine
	git -C "$DEV" -c core.abbrev=9 format-patch -q -N -o "$P" --zero-commit --no-signature pristine..dev
	{
		echo "# zcrx-rs kernel patch series, applied in order on top of linux-source-7.2"
		echo "# by scripts/kernel.sh. One \`git format-patch\` file per line."
		(cd "$P" && ls *.patch)
	} > "$P/series"
	msg "exported $(ls "$P"/*.patch | wc -l) patches to $P"
	;;
checkpatch)
	rc=0
	# UNKNOWN_COMMIT_ID: checkpatch looks up the ids of Fixes: tags with
	# git, and neither this repository nor the tarball's tree has upstream
	# history. The ids are checked by hand (kernel-patches.rst).
	# MISSING_SIGN_OFF: the patches carry no Signed-off-by; the person who
	# sends them adds theirs (the DCO is theirs to give).
	for p in $PATCHES; do
		out=$(perl "$SRC/scripts/checkpatch.pl" --strict --no-tree --quiet \
			--ignore UNKNOWN_COMMIT_ID,MISSING_SIGN_OFF "$P/$p" 2>&1) || rc=1
		if [ -n "$out" ]; then echo "$p:"; echo "$out"; rc=1; else echo "$p: clean"; fi
	done
	exit $rc
	;;
-h|--help) usage ;;
*) usage >&2; exit 2 ;;
esac
