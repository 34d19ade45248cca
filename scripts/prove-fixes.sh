#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Mutation testing of the series' fixes: for each fix that
# scripts/patches/proofs names, build the kernel without that one patch and
# run the tests that show it. Each must fail, and its output must match the
# pattern the proofs file gives (the splat or error the fix is about). A
# test that passes without its fix, or fails for another reason, is
# reported as not proving it, and the run fails.
set -euo pipefail
shopt -s inherit_errexit   # a failure inside $(...) stops the script too
. "$(dirname "$0")/lib.sh"

usage() {
	cat <<USAGE
usage: [KVER=7.3] scripts/prove-fixes.sh [--list] [N|NAME ...]

Builds, in the worktree \$ZCRX_CACHE/linux/prove and build/prove of the
cache, the kernel with the whole series but one patch (the fast flavour's
config plus CONFIG_DMA_API_DEBUG, which two of the proofs need), boots it
with the module built against it, and runs that patch's tests
(scripts/patches/proofs). N is a patch's number in the series, NAME its
file name; none means every patch in the proofs file. Going from one
patch to the next rebuilds only the files the two patches touch (patches
that change a header come last); the first build takes as long as a fast
kernel (about 13 min on 2 cores), each proof then 1-3 min, or 5-12 min
for a patch that changes a header. A proof holds when the VM run fails
and its output matches the patch's pattern; a run with any proof that
does not hold fails.

  --list   print the proofs (patch, tests, pattern) and exit

Needs the fast kernel's config and the tools (make prove-fixes builds
them). The report is \$ZCRX_CACHE/build/prove/proofs.txt; each proof's VM
output is in build/prove/vm-logs/prove-N.log.
USAGE
}

list=
want=()
while [ $# -gt 0 ]; do
	case $1 in
	-h|--help) usage; exit 0 ;;
	--list) list=1 ;;
	-*) usage >&2; die "unknown option $1" ;;
	*) want+=("$1") ;;
	esac
	shift
done

P=$PATCHES_DIR
PROOFS=$ZCRX_TOP/scripts/patches/proofs
SRC=$KLINUX/src
W=$KLINUX/prove
B=$KBUILDS/prove
SELFTEST=$ZCRX_TOP/tools/target/release/zcrx-selftest
SERIES=$(grep -v -e '^#' -e '^$' "$P/series")

# The series file name of the patch whose slug is $1 (empty if none).
series_name() { echo "$SERIES" | grep -x "[0-9][0-9][0-9][0-9]-$1" || true; }

# The proofs to run, cheapest rebuild order: patches that change no header
# first, in series order, then the others.
declare -A tests_of pattern_of also_of
proofs=()
while IFS=$'\t' read -r s tests pattern also; do
	case $s in ''|'#'*) continue ;; esac
	p=$(series_name "$s")
	[ -n "$p" ] || die "scripts/patches/proofs names $s, which is not in $P/series"
	tests_of[$p]=$tests
	pattern_of[$p]=$pattern
	also_of[$p]=
	for x in ${also//,/ }; do
		q=$(series_name "$x")
		[ -n "$q" ] || die "scripts/patches/proofs: $s needs $x left out too, which is not in $P/series"
		also_of[$p]+="$q "
	done
	proofs+=("$p")
done < "$PROOFS"

if [ ${#want[@]} -gt 0 ]; then
	sel=()
	for x in "${want[@]}"; do
		case $x in
		*[!0-9]*) p=$(series_name "$(slug "$x")") ;;
		*) p=$(echo "$SERIES" | grep "^$(printf '%04d' "$((10#$x))")-" || true) ;;
		esac
		[ -n "$p" ] || die "no patch $x in $P/series"
		[ -n "${tests_of[$p]:-}" ] || die "$p has no proof in scripts/patches/proofs"
		sel+=("$p")
	done
	proofs=("${sel[@]}")
fi
ordered=()
for p in "${proofs[@]}"; do grep -q '^+++ b/include/' "$P/$p" || ordered+=("$p"); done
for p in "${proofs[@]}"; do grep -q '^+++ b/include/' "$P/$p" && ordered+=("$p"); done

if [ -n "$list" ]; then
	for p in "${ordered[@]}"; do
		printf '%s\n    tests:   %s\n    pattern: %s\n' "$p" "${tests_of[$p]//,/ }" "${pattern_of[$p]}"
		[ -z "${also_of[$p]}" ] || printf '    also without: %s\n' "${also_of[$p]}"
	done
	exit 0
fi

[ -x "$SELFTEST" ] || die "no $SELFTEST; run make tools"
[ -d "$SRC/.git" ] || die "no kernel tree yet; run scripts/kernel.sh --flavour fast"
FASTCFG=$(build_dir fast)/.config
[ -f "$FASTCFG" ] || die "no fast kernel config; run scripts/kernel.sh --flavour fast config"
kbuild_env
cache_lock build-prove
source_lock shared

# The tree of the whole series without the patches named: the series
# applied with them left out, or, where a later patch needs their context,
# the whole series with them reverted (three-way, last first). Prints the
# commit.
tree_without() {
	local idx=$SRC/.git/zcrx-prove.index p q tree how="left out" rev=
	rm -f "$idx"
	GIT_INDEX_FILE=$idx git_src read-tree pristine
	for p in $SERIES; do
		case " $* " in *" $p "*) continue ;; esac
		GIT_INDEX_FILE=$idx git_src apply --cached "$P/$p" 2>/dev/null || { how=; break; }
	done
	if [ -z "$how" ]; then
		how="reverted"
		GIT_INDEX_FILE=$idx git_src read-tree pristine
		for p in $SERIES; do GIT_INDEX_FILE=$idx git_src apply --cached "$P/$p"; done
		for q in "$@"; do rev="$q $rev"; done
		for q in $rev; do
			GIT_INDEX_FILE=$idx git_src apply -R -3 --cached "$P/$q" >/dev/null 2>&1 ||
				{ rm -f "$idx"; die "$q can neither be left out of the series nor reverted from it"; }
		done
	fi
	tree=$(GIT_INDEX_FILE=$idx git_src write-tree)
	rm -f "$idx"
	msg "the series without $* ($how)"
	echo "$how" > "$B/.zcrx-prove-how"
	git_src commit-tree -p pristine -m "zcrx-rs series without $*" "$tree"
}

# make in the worktree, with a progress line every minute.
kmake() {
	local rc=0 ticker
	( while sleep 60; do
		printf '==> kernel build (prove): %s objects so far\n' \
			"$(grep -c -E '^  (CC|RUSTC)' "$B/build.log" 2>/dev/null || echo 0)" >&2
	  done ) 8>&- 9>&- &
	ticker=$!
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -C "$W" O="$B" -j"$(nproc)" "$@" > "$B/build.log" 2>&1 || rc=$?
	kill "$ticker" 2>/dev/null; wait "$ticker" 2>/dev/null || true
	if [ $rc -ne 0 ]; then
		{ grep -E -B2 -A8 'error[:\[]|Error [0-9]' "$B/build.log" || true; } | tail -40 >&2
		die "the kernel without $cur does not build (log: $B/build.log)"
	fi
}

build_without() {
	local p=$1 commit key
	# shellcheck disable=SC2086 # a list of series file names
	commit=$(tree_without "$p" ${also_of[$p]})
	if ! git -C "$W" rev-parse --git-dir >/dev/null 2>&1; then
		rm -rf "$W"
		git_src worktree prune
		git_src worktree add -q -f --detach "$W" "$commit"
	else
		# only the files that differ are rewritten: make rebuilds what the
		# two patches (the one back in, the one out) touch
		git -C "$W" checkout -q -f --detach "$commit"
	fi
	mkdir -p "$B"
	key="$(sha256sum < "$FASTCFG" | cut -c1-12) +DMA_API_DEBUG"
	if [ "$(cat "$B/.zcrx-prove-config" 2>/dev/null)" != "$key" ]; then
		cp "$FASTCFG" "$B/.config"
		"$W/scripts/config" --file "$B/.config" -e DMA_API_DEBUG
		env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C "$W" O="$B" olddefconfig >/dev/null
		echo "$key" > "$B/.zcrx-prove-config"
	fi
	stage_begin "prove-build $(echo "$p" | cut -c1-4)"
	kmake bzImage modules
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
		make -s -C "$W" O="$B" INSTALL_HDR_PATH="$B/usr-headers" headers_install >> "$B/build.log" 2>&1 ||
		die "make headers_install failed (see $B/build.log)"
	# the module as make module builds it (with its KUnit suites); not
	# through make module, which would wait for the lock this script holds
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
		make -s -C "$B" M="$ZCRX_TOP" MO="$B/zcrx-module" ZCRX_KUNIT=1 modules >> "$B/build.log" 2>&1 ||
		{ tail -30 "$B/build.log" >&2; die "the module does not build against the kernel without $p"; }
	"$ZCRX_TOP/scripts/build-iou-zcrx.sh" --flavour prove
	"$ZCRX_TOP/scripts/build-ncdevmem.sh" --flavour prove
	stage_end
}

# What went wrong: the first lines of a splat on the console if there is
# one (not the boot's own "DMA-API: preallocated ..." lines), then the
# first line that matched the proof's pattern, and the failed tests.
SPLAT='kernel BUG at|WARNING: |BUG: |Oops|DMA-API: [^ ]+ [^ ]+: |general protection|Kernel panic'
first_lines() {
	local con=$1 out=$2 err=$3 pattern=$4
	{
		if grep -q -E "$SPLAT" "$con"; then
			grep -m1 -A3 -E "$SPLAT" "$con" | sed -E 's/^\[ *[0-9.]+\] //' || true
			grep -m1 -E 'RIP: ' "$con" | sed -E 's/^\[ *[0-9.]+\] //' || true
		fi
		grep -h -m1 -s -E "$pattern" "$out" "$err" "$con" | head -1 |
			sed -E 's/^\[ *[0-9.]+\] //; s/^/matched: /' || true
		grep -s '^not ok' "$out" || true
	} | cut -c1-240
}

mkdir -p "$B"
REPORT=$B/proofs.txt
: > "$REPORT"
proven=0 unproven=0
for cur in "${ordered[@]}"; do
	n=$(echo "$cur" | cut -c1-4)
	build_without "$cur"
	out=$B/vm-logs/prove-$n.out
	err=$B/vm-logs/prove-$n.err
	mkdir -p "$B/vm-logs"
	msg "without $cur: ${tests_of[$cur]//,/ }"
	con=$B/vm-logs/prove-$n.log
	# no log of an earlier run may stand in for this one
	rm -f "$con" "$out" "$err"
	rc=0
	# shellcheck disable=SC2086 # the tests, one word each
	"$ZCRX_TOP/scripts/vm.sh" --flavour prove --name "prove-$n" --timeout 900 -- \
		"$SELFTEST" --module "$B/zcrx-module/rust/zcrx_rs.ko" ${tests_of[$cur]//,/ } \
		> "$out" 2> "$err" 8>&- 9>&- || rc=$?
	if ! grep -q '^# zcrx-guest:' "$out" 2>/dev/null; then
		verdict="NOT PROVEN: the tests did not start (rc $rc; see $err)"
		unproven=$((unproven + 1))
	elif [ $rc -eq 0 ]; then
		verdict="NOT PROVEN: the tests pass without it"
		unproven=$((unproven + 1))
	elif grep -q -s -E "${pattern_of[$cur]}" "$con" "$out" "$err"; then   # not cat | grep -q: pipefail
		verdict="proven: fails without it (rc $rc)"
		proven=$((proven + 1))
	else
		verdict="NOT PROVEN: fails without it, but not with /${pattern_of[$cur]}/ (rc $rc)"
		unproven=$((unproven + 1))
	fi
	{
		echo "## $cur"
		echo "kernel: the series without it${also_of[$cur]:+ and ${also_of[$cur]% } (which need it)} ($(cat "$B/.zcrx-prove-how")), fast config + DMA_API_DEBUG"
		echo "tests: ${tests_of[$cur]//,/ } (again: make prove-fixes PROVE=$((10#$n)))"
		echo "verdict: $verdict"
		[ $rc -eq 0 ] || { first_lines "$con" "$out" "$err" "${pattern_of[$cur]}" || true; } | sed 's/^/    /'
		echo
	} | tee -a "$REPORT"
done
echo "prove-fixes: $proven proven, $unproven not proven (report: $REPORT)"
[ "$unproven" -eq 0 ]
