#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Fetch, patch, configure and build the zcrx-rs test kernel (Linux 7.2.x, or
# 7.3.x with KVER=7.3: see scripts/lib.sh).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() {
	cat <<USAGE
usage: scripts/kernel.sh [--flavour fast|debug|pristine] [--force] [STEP...]

Steps (default: all of them, in order):
  source   unpack linux-source-\$KVER into \$ZCRX_CACHE/linux/src (7.3:
           linux-7.3/src; a git tree, tagged 'pristine') and apply
           scripts/patches/series (7.3: scripts/patches-7.3/series) on top
  config   allnoconfig + scripts/config/base.config + scripts/config/FLAVOUR.config;
           fails if any requested option did not make it into .config
  build    bzImage + modules + headers_install, with LLVM=$LLVM_SUFFIX
  print-dir
           print the build directory of this flavour (for Makefiles)

Flavours: fast (default), debug (KASAN, lockdep, kmemleak, fault injection),
pristine (the release as Debian ships it, without the series, with the fast
flavour's options: the baseline of make tree-tests; its source is a tree of
its own, \$ZCRX_CACHE/linux/pristine-src, and options only the series adds
are left out with a note).

Build outputs go to \$ZCRX_CACHE/build/FLAVOUR (O= build, the source tree stays
clean). Each step records what it was made from (kernel version, hash of the
patch series, hash of the config fragments); when nothing changed the step
costs nothing, when something did the build is incremental: re-applying the
series only rewrites files whose content changed.

--force  redo the steps even when their inputs did not change.
USAGE
}

flavour=fast force= steps=
while [ $# -gt 0 ]; do
	case $1 in
	--flavour|--flavor) flavour=$2; shift ;;
	--flavour=*|--flavor=*) flavour=${1#*=} ;;
	--force) force=1 ;;
	-h|--help) usage; exit 0 ;;
	source|config|build|print-dir) steps="$steps $1" ;;
	*) usage >&2; die "unknown argument: $1" ;;
	esac
	shift
done
[ -f "$ZCRX_TOP/scripts/config/$flavour.config" ] || die "unknown flavour '$flavour' (fast, debug or pristine)"
# `source` alone writes nothing into the build directory: no build lock.
case " $steps " in
*" print-dir "*) ;;
"  source ") source_lock shared ;;
*) cache_lock "build-$flavour"; source_lock shared ;;
esac
steps=${steps:-"source config build"}

SRC=$KLINUX/src
[ "$flavour" = pristine ] && SRC=$KLINUX/pristine-src
B=$(build_dir "$flavour")
PATCHES=$PATCHES_DIR

do_source() {
	local debver tarball sh head_sh
	debver=$(cat "$KLINUX/deb-version" 2>/dev/null) ||
		die "$KSRC_PKG is not downloaded; run scripts/toolchain.sh (with the same KVER)"
	if [ "$flavour" = pristine ]; then
		do_source_pristine "$debver"
		return
	fi
	# Checked under the shared lock (another flavour may be building from
	# the tree); only a tree that must change takes it exclusively.
	if source_current "$debver"; then
		msg "kernel source up to date (linux $debver + series $(series_hash))"
		return
	fi
	source_lock exclusive
	do_source_locked "$debver"
	source_lock shared
}

source_current() {
	[ "$(cat "$SRC/.git/zcrx-deb-version" 2>/dev/null)" = "$1" ] || return 1
	[ "$(git_src log -1 --format=%s HEAD 2>/dev/null | sed -n 's/^zcrx-rs series //p')" = "$(series_hash)" ] &&
		[ -z "$force" ] && git_src diff --quiet HEAD
}

do_source_locked() {
	local debver=$1 tarball sh head_sh
	tarball=$(ls "$KLINUX"/root/usr/src/"$KSRC_PKG".tar.* | head -1)
	if [ "$(cat "$SRC/.git/zcrx-deb-version" 2>/dev/null)" != "$debver" ]; then
		stage_begin kernel-unpack
		rm -rf "$SRC"
		mkdir -p "$SRC"
		tar -xf "$tarball" -C "$SRC" --strip-components=1
		# Debian's tarball ignores everything at the top level (/*): add with -f.
		git_src init -q
		git_src add -f -A .
		git_src commit -q -m "pristine $debver"
		git_src tag -f pristine >/dev/null
		echo "$debver" > "$SRC/.git/zcrx-deb-version"
		stage_end
	fi

	sh=$(series_hash)
	head_sh=$(git_src log -1 --format=%s HEAD | sed -n 's/^zcrx-rs series //p')
	if [ "$head_sh" = "$sh" ] && [ -z "$force" ] && git_src diff --quiet HEAD; then
		msg "kernel source up to date (linux $debver + series $sh)"
		return
	fi
	stage_begin kernel-patch
	# Apply the series to a scratch index, never to the work tree, then move
	# the work tree there with checkout: only files whose content differs
	# from what is checked out now are rewritten, so make rebuilds only what
	# the changed patches touch.
	local idx=$SRC/.git/zcrx-series.index tree commit p n=0
	rm -f "$idx"
	GIT_INDEX_FILE=$idx git_src read-tree pristine
	while read -r p; do
		case $p in ''|'#'*) continue ;; esac
		[ -f "$PATCHES/$p" ] || die "scripts/patches/series names $p, which does not exist"
		GIT_INDEX_FILE=$idx git_src apply --cached --whitespace=error-all "$PATCHES/$p" ||
			die "patch $p does not apply to linux $debver (git apply --cached failed above)"
		n=$((n + 1))
	done < "$PATCHES/series"
	tree=$(GIT_INDEX_FILE=$idx git_src write-tree)
	rm -f "$idx"
	commit=$(git_src commit-tree -p pristine -m "zcrx-rs series $sh" "$tree")
	git_src reset -q --hard   # drop stray edits to the tracked tree, if any
	git_src checkout -q --detach "$commit"
	stage_end
	msg "kernel source: linux $debver + $n patches (series $sh)"
}

# The pristine tree: the tarball unpacked, nothing applied; no git (its
# builds are keyed by the Debian version).
do_source_pristine() {
	local debver=$1 tarball
	if [ "$(cat "$SRC/.zcrx-deb-version" 2>/dev/null)" = "$debver" ] && [ -z "$force" ]; then
		msg "pristine kernel source up to date (linux $debver)"
		return
	fi
	stage_begin kernel-unpack-pristine
	tarball=$(ls "$KLINUX"/root/usr/src/"$KSRC_PKG".tar.* | head -1)
	rm -rf "$SRC"
	mkdir -p "$SRC"
	tar -xf "$tarball" -C "$SRC" --strip-components=1
	echo "$debver" > "$SRC/.zcrx-deb-version"
	stage_end
	msg "pristine kernel source: linux $debver in $SRC"
}
src_id() {
	if [ "$flavour" = pristine ]; then
		echo "pristine-$(cat "$SRC/.zcrx-deb-version")"
	else
		git_src rev-parse HEAD
	fi
}

frag_file() { echo "$B/zcrx-fragment.config"; }

do_config() {
	local key frag missing=
	kbuild_env
	key="$(cat "$KLINUX/deb-version") $(config_hash "$flavour") $(src_id)"
	mkdir -p "$B"
	if [ "$(cat "$B/.zcrx-config-key" 2>/dev/null)" = "$key" ] && [ -f "$B/.config" ] && [ -z "$force" ]; then
		msg "kernel config ($flavour) up to date"
		return
	fi
	stage_begin kernel-config
	frag=$(frag_file)
	# shellcheck disable=SC2046 # a list of paths without spaces
	cat $(config_frags "$flavour") > "$frag"
	make -s -C "$SRC" O="$B" KCONFIG_ALLCONFIG="$frag" allnoconfig ||
		die "kernel configuration failed (allnoconfig + $frag)"
	while IFS= read -r l; do
		case $l in
		CONFIG_*=*) grep -qxF -- "$l" "$B/.config" || missing="$missing\n  $l" ;;
		'# CONFIG_'*' is not set')
			local sym=${l#\# }; sym=${sym%% *}
			grep -q "^$sym=" "$B/.config" && missing="$missing\n  $l" ;;
		esac
	done < "$frag"
	if [ -n "$missing" ] && [ "$flavour" = pristine ]; then
		# only what the series itself adds may be missing there
		local left= m sym
		while IFS= read -r m || [ -n "$m" ]; do
			[ -n "$m" ] || continue
			sym=$(echo "$m" | grep -oE 'CONFIG_[A-Za-z0-9_]+' | head -1)
			if cat "$PATCHES"/*.patch | grep -qx "+config ${sym#CONFIG_}"; then
				msg "left out of the pristine kernel (the series adds it): $sym"
			else
				left="$left\n$m"
			fi
		done < <(printf "$missing")
		missing=$left
	fi
	[ -z "$missing" ] || die "$(printf "these options from scripts/config/{base,$flavour}.config did not survive Kconfig\n(missing dependency, or not user-selectable):$missing")"
	make -s -C "$SRC" O="$B" rustavailable >/dev/null ||
		die "the kernel says Rust is not available: run 'make -C $SRC O=$B LLVM=$LLVM_SUFFIX rustavailable' for details (rust-src/bindgen/libclang versions)"
	echo "$key" > "$B/.zcrx-config-key"
	rm -f "$B/.zcrx-build-key"
	stage_end
}

do_build() {
	local key jobs
	kbuild_env
	[ -f "$B/.zcrx-config-key" ] || die "kernel ($flavour) is not configured; run scripts/kernel.sh config"
	key="$(cat "$B/.zcrx-config-key") $(src_id)"
	if [ "$(cat "$B/.zcrx-build-key" 2>/dev/null)" = "$key" ] && [ -f "$B/arch/x86/boot/bzImage" ] && [ -z "$force" ]; then
		msg "kernel build ($flavour) up to date: $B"
		return
	fi
	stage_begin "kernel-build-$flavour"
	jobs=$(nproc)
	msg "building linux ($flavour) in $B with -j$jobs; a clean build takes 8-9 min on 2 cores (measured 2026-12-06: fast 478 s, debug 504 s)"
	msg "full log: $B/build.log"
	# A progress line every minute: the number of objects built so far.
	( while sleep 60; do
		printf '==> kernel build (%s): %s objects so far\n' "$flavour" \
			"$(grep -c -E '^  (CC|RUSTC)' "$B/build.log" 2>/dev/null || echo 0)" >&2
	  done ) 8>&- 9>&- &   # not the locks: an orphaned sleep would hold them
	local ticker=$!
	local rc=0
	# Not the caller's make flags: under `make -s` the kernel's make would
	# be silent, and the log and the progress line above empty.
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
		make -C "$SRC" O="$B" -j"$jobs" bzImage modules > "$B/build.log" 2>&1 || rc=$?
	kill "$ticker" 2>/dev/null; wait "$ticker" 2>/dev/null || true
	if [ $rc -ne 0 ]; then
		grep -E -B2 -A8 'error[:\[]|Error [0-9]' "$B/build.log" | tail -60 >&2
		die "kernel build ($flavour) failed; the errors are above, the full log in $B/build.log"
	fi
	make -s -C "$SRC" O="$B" INSTALL_HDR_PATH="$B/usr-headers" headers_install >> "$B/build.log" 2>&1 ||
		die "make headers_install failed (see $B/build.log)"
	echo "$key" > "$B/.zcrx-build-key"
	stage_end
	msg "kernel ($flavour): $(cat "$B/include/config/kernel.release") in $B"
}

for s in $steps; do
	case $s in
	source) do_source ;;
	config) do_config ;;
	build) do_build ;;
	print-dir) echo "$B" ;;
	esac
done
