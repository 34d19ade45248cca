#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Work on the kernel patch series in a git worktree of the cached tree.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() {
	cat <<USAGE
usage: [KVER=7.3] scripts/kpatch.sh dev|export|checkpatch|versions|split-check|send

The series of KVER (scripts/lib.sh): scripts/patches for 7.2 (default),
scripts/patches-7.3 for 7.3, each in its own tree and worktrees.

  dev         create (or reset) the worktree \$ZCRX_CACHE/linux/dev, branch
              'dev' = pristine 7.2 + scripts/patches/series applied with git am.
              Edit and commit there (one concern per commit). New files need
              \`git add -f\`: Debian's .gitignore ignores the top level.
  export      write dev's commits since 'pristine' to scripts/patches/ with
              git format-patch and rewrite the series file, each patch in
              the part ("## net", "## net-next", "## rfc", "## local") it was in; a new
              patch joins the part of the patch before it (move the "## "
              line if that is wrong). Fails if dev's order mixes the parts.
  checkpatch  run the tree's scripts/checkpatch.pl --strict on every patch;
              fails if any reports an error, warning or check
  versions    check that the series applies, in order and without fuzz, to
              every linux-source-7.2 in KERNEL_DEB_VERSIONS (scripts/lib.sh):
              downloads each .deb (private apt config, see toolchain.sh) into
              \$ZCRX_CACHE/versions and unpacks only the files the series touches
  split-check [--build]
              apply each part with what it needs before it (net; net and
              net-next; all) to pristine with git am; with --build, also
              build the first two with the fast flavour's config in
              build/split of the cache (about 10 min cold, 2 cores): the net
              fixes and the netdevsim series must not need the RFC
  send [DIR]  what \`make patches\` runs: each part but local as git format-patch
              output with a cover letter (scripts/patches/cover/PART) in
              DIR/PART (default out/patches), authored by the sender: git
              config user.name/user.email of this repository, or
              GIT_AUTHOR_NAME/GIT_AUTHOR_EMAIL. SIGNOFF=1 adds their
              Signed-off-by: (the DCO is the sender's to give, so only on
              request)
USAGE
}
SRC=$KLINUX/src
DEV=$KLINUX/dev
P=$PATCHES_DIR
PATCHES=$(grep -v -e '^#' -e '^$' "$P/series")
PARTS="net net-next rfc local"

# The patches of part $1 (a "## $1" line starts it in the series file).
part_patches() {
	awk -v part="$1" '/^## / { cur = $2; next } /^#/ || /^$/ { next } cur == part' "$P/series"
}
# The patches of part $1 and of every part before it.
upto_patches() {
	local part
	for part in $PARTS; do
		part_patches "$part"
		[ "$part" = "$1" ] && return
	done
}

# git am of the patches named on stdin (series file names) in worktree $1;
# the From: of each replaced by $2 when given.
am_patches() {
	local w=$1 from=${2:-} p
	# the sender's name and address, escaped for sed's replacement
	from=$(printf '%s' "$from" | sed 's/[\/&]/\\&/g')
	while read -r p; do
		if [ -n "$from" ]; then
			sed "1,/^\$/s/^From: .*/From: $from/" "$P/$p"
		else
			cat "$P/$p"
		fi | git -C "$w" -c user.name=zcrx-rs -c user.email=zcrx-rs@localhost am -q --keep-cr ||
			{ git -C "$w" am --abort 2>/dev/null || true; die "$p does not apply with git am (with what comes before it)"; }
	done
}
# A detached worktree of the cached tree at 'pristine', for one job.
scratch_tree() {
	local w=$KLINUX/$1
	git -C "$SRC" worktree remove -f "$w" 2>/dev/null || rm -rf "$w"
	git -C "$SRC" worktree prune
	git -C "$SRC" worktree add -q -f --detach "$w" pristine
	echo "$w"
}

# Applies the series to the $KSRC_PKG .deb of version $1.
check_version() {
	local v=$1 d=$ZCRX_CACHE/versions/$1 files p ok=0
	mkdir -p "$d"
	if ! ls "$d"/"$KSRC_PKG"_*.deb >/dev/null 2>&1; then
		(cd "$d" && apt_x download "$KSRC_PKG=$v" >/dev/null) ||
			{ warn "$v: cannot download $KSRC_PKG=$v (run scripts/toolchain.sh first?)"; return 1; }
	fi
	files=$(cd "$P" && cat $PATCHES | sed -n 's|^--- a/||p' | sort -u)
	rm -rf "$d/tree" && mkdir -p "$d/tree"
	dpkg-deb --fsys-tarfile "$d"/"$KSRC_PKG"_*.deb | tar -xO ./usr/src/"$KSRC_PKG".tar.xz |
		tar -xJ -C "$d/tree" --strip-components=1 $(printf "$KSRC_PKG/%s " $files) ||
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
	echo "$PATCHES" | am_patches "$DEV"
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
	# each patch stays in its part; a new one joins the part before it
	declare -A part_of
	for part in $PARTS; do
		for p in $(part_patches "$part"); do part_of[$(slug "$p")]=$part; done
	done
	{
		echo "# zcrx-rs kernel patch series, applied in order on top of $KSRC_PKG"
		echo "# by scripts/kernel.sh. One \`git format-patch\` file per line. A \"## PART\""
		echo "# line starts what goes to one tree (make patches): net (fixes of"
		echo "# upstream bugs), net-next (netdevsim), rfc (what an out-of-tree"
		echo "# provider needs), local (test knobs we do not send). A part may use"
		echo "# the parts before it, never one after."
		cur= seen=" "
		for p in $(cd "$P" && ls *.patch); do
			part=${part_of[$(slug "$p")]:-}
			if [ -z "$part" ]; then
				part=${cur:-net}
				msg "new patch $p: put in part $part (move its \"## \" line if that is wrong)"
			fi
			if [ "$part" != "$cur" ]; then
				case $seen in *" $part "*) die "dev's order mixes the parts: $p ($part) comes after patches of a later part; reorder dev (git rebase -i pristine)" ;; esac
				seen="$seen$part "
				echo "## $part"
				cur=$part
			fi
			echo "$p"
		done
	} > "$P/series.new"
	# the parts must come in $PARTS order
	[ "$(grep '^## ' "$P/series.new" | cut -c4- | tr '\n' ' ')" = "$(for x in $PARTS; do grep -qx "## $x" "$P/series.new" && printf '%s ' "$x"; done)" ] ||
		die "the parts of dev's series are not in the order $PARTS"
	mv "$P/series.new" "$P/series"
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
split-check)
	build=
	[ "${2:-}" = --build ] && build=1
	W=$(scratch_tree split)
	for part in $PARTS; do
		part_patches "$part" | am_patches "$W"
		msg "$part: $(upto_patches "$part" | wc -l) patches (up to and with $part) apply to pristine with git am"
		# built: net alone, and net with net-next (not the RFC, not local)
		[ -n "$build" ] || continue
		case $part in net|net-next) ;; *) continue ;; esac
		kbuild_env
		cache_lock build-split
		B=$KBUILDS/split
		mkdir -p "$B"
		cp "$(build_dir fast)/.config" "$B/.config" ||
			die "no fast kernel config to build with; run scripts/kernel.sh --flavour fast config"
		make -s -C "$W" O="$B" olddefconfig >/dev/null
		msg "building the kernel with patches up to $part in $B (log: $B/build.log)"
		make -C "$W" O="$B" -j"$(nproc)" bzImage modules > "$B/build.log" 2>&1 ||
			{ grep -E -B2 -A8 'error[:\[]|Error [0-9]' "$B/build.log" | tail -40 >&2; die "the kernel with patches up to $part does not build"; }
		msg "$part: builds"
	done
	git -C "$SRC" worktree remove -f "$W"
	;;
send)
	out=${2:-$ZCRX_TOP/out/patches}
	name=${GIT_AUTHOR_NAME:-$(git -C "$ZCRX_TOP" config user.name || true)}
	email=${GIT_AUTHOR_EMAIL:-$(git -C "$ZCRX_TOP" config user.email || true)}
	case $email in
	''|*.example|*.invalid|*@localhost|*noreply*)
		die "the patches go out under the sender's name: set git config user.name and user.email in $ZCRX_TOP (or GIT_AUTHOR_NAME/GIT_AUTHOR_EMAIL); '$email' is not an address that can send" ;;
	esac
	[ -n "$name" ] || die "set git config user.name (or GIT_AUTHOR_NAME)"
	debver=$(cat "$KLINUX/deb-version")
	kernel="Linux ${debver%%-*} (Debian $KSRC_PKG $debver)"
	signoff=
	case ${SIGNOFF:-0} in
	1) signoff=--signoff ;;
	0) ;;
	*) die "SIGNOFF=1 adds your Signed-off-by:, SIGNOFF=0 (the default) does not; not '$SIGNOFF'" ;;
	esac
	W=$(scratch_tree send)
	rm -rf "$out"
	base=pristine
	for part in $PARTS; do
		[ "$part" != local ] || continue   # ours: not sent
		part_patches "$part" | am_patches "$W" "$name <$email>"
		# the series' own cover letter, else the 7.2 one (they differ only
		# where the parts do: 7.3's rfc has two patches fewer)
		cover=$P/cover/$part
		[ -f "$cover" ] || cover=$ZCRX_TOP/scripts/patches/cover/$part
		[ -f "$cover" ] || die "no cover letter for $part: $cover"
		case $part in
		net) prefix="PATCH net" ;;
		net-next) prefix="PATCH net-next" ;;
		*) prefix="RFC PATCH net-next" ;;
		esac
		git -C "$W" -c user.name="$name" -c user.email="$email" -c core.abbrev=12 \
			format-patch -q -o "$out/$part" --cover-letter --subject-prefix="$prefix" \
			--zero-commit --no-signature $signoff "$base"..HEAD
		# the cover letter: its subject (the first line of $cover) and text
		subject=$(head -1 "$cover")
		python3 - "$out/$part/0000-cover-letter.patch" "$cover" "$subject" "$kernel" <<'PY'
import os, sys
path, cover, subject, kernel = sys.argv[1:]
text = open(path).read()
blurb = open(cover).read().split('\n', 1)[1].strip('\n')
if os.environ.get('SIGNOFF') == '1':
    # the sender signed off: the note for the sender goes
    blurb = blurb.split('\nThe patches carry no Signed-off-by')[0].rstrip('\n')
text = text.replace('*** SUBJECT HERE ***', subject).replace('*** BLURB HERE ***', blurb)
text = text.replace('@KERNEL@', kernel)
open(path, 'w').write(text)
PY
		base=$(git -C "$W" rev-parse HEAD)
		msg "$part: $(ls "$out/$part" | grep -vc '^0000-') patches and a cover letter in $out/$part (\"[$prefix]\")"
	done
	git -C "$SRC" worktree remove -f "$W"
	[ -n "$signoff" ] || msg "no Signed-off-by: add yours (SIGNOFF=1) once you can certify the DCO for every patch"
	;;
-h|--help) usage ;;
*) usage >&2; exit 2 ;;
esac
