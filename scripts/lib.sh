# SPDX-License-Identifier: GPL-2.0
# Shared settings for the zcrx-rs scripts. Sourced, never run.

# Everything we download or build lives here, outside the repository.
ZCRX_CACHE=${ZCRX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/zcrx-rs}
ZCRX_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# The kernel zcrx-rs is built and tested on: KVER=7.2 (the default) or
# KVER=7.3. Each has its own Debian linux-source package, patch series,
# source tree and build directories, so both can be kept in the cache:
#   KLINUX   the unpacked .deb, the tree (src) and its worktrees
#   KBUILDS  one build directory per flavour
# Pinned versions: the kernel falls back to the other builds the mirror
# may still carry; the series must apply to all of them. (7.2.9 is not
# one: it lacks the stable change around patch 14's hunk.)
KVER=${KVER:-7.2}
case $KVER in
7.2)
	KERNEL_DEB_VERSIONS=${KERNEL_DEB_VERSIONS:-"7.2.12-1~bpo13+1 7.2.13-1 7.2.11-1~bpo13+1"}
	KLINUX=$ZCRX_CACHE/linux
	KBUILDS=$ZCRX_CACHE/build
	PATCHES_DIR=$ZCRX_TOP/scripts/patches
	;;
7.3)
	KERNEL_DEB_VERSIONS=${KERNEL_DEB_VERSIONS:-"7.3.4-1~bpo13+1"}
	KLINUX=$ZCRX_CACHE/linux-7.3
	KBUILDS=$ZCRX_CACHE/build-7.3
	PATCHES_DIR=$ZCRX_TOP/scripts/patches-7.3
	;;
*)
	printf 'error: KVER=%s: zcrx-rs builds for KVER=7.2 or KVER=7.3\n' "$KVER" >&2
	exit 2
	;;
esac
# The Debian package of the kernel source: linux-source-$KVER.
KSRC_PKG=linux-source-$KVER
RUST_SRC_DEB_PREFIX="+dfsg1-"          # rust-src=<rustc version>+dfsg1-<debian rev>
BINDGEN_VERSION=0.72.1
VIRTME_NG_VERSION=1.42
LIBURING_DEB_VERSIONS="2.15-1 2.9-1"
# bookworm's ethtool (6.1) cannot set header split; the tree's selftests
# want a current one (run from the cache, never installed).
ETHTOOL_DEB_VERSIONS="1:7.2-1"
LLVM_SUFFIX=-19

# Debian suites used only to download source packages; see scripts/toolchain.sh.
EXTRA_SUITES="trixie-backports sid"
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

# The private, download-only apt configuration scripts/toolchain.sh writes:
# apt_x runs apt-get with it (the system's apt sources are never used).
APT_DIR=$ZCRX_CACHE/apt
APT_OPTS=(-o "Dir::Etc::SourceList=$APT_DIR/sources.list" -o Dir::Etc::SourceParts=/dev/null
	  -o "Dir::State::Lists=$APT_DIR/lists" -o "Dir::Cache=$APT_DIR/cache"
	  -o Dir::Etc::Preferences=/dev/null -o "Dir::Etc::PreferencesParts=$APT_DIR/prefs.d"
	  -o APT::Sandbox::User=root -q)
apt_x() { apt-get "${APT_OPTS[@]}" "$@"; }

msg()  { printf '==> %s\n' "$*" >&2; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die()  { printf 'error: %s\n' "$*" >&2; exit 1; }

# For scripts whose settings are environment variables (make fuzz, soak,
# fuzz-net, tree-tests): no_args "$@" prints the script's header comment
# for --help and refuses any other argument (exit 2) rather than ignoring
# it and starting a long VM run.
no_args() {
	[ $# -eq 0 ] && return 0
	local rc=2
	case $1 in -h|--help) rc=0 ;; esac
	{
		echo "usage: ${0#"$ZCRX_TOP"/} (no arguments; settings from the environment)"
		echo
		sed -n '4,$ { /^#/!q; s/^# \{0,1\}//p }' "$0"
	} | if [ $rc -eq 0 ]; then cat; else cat >&2; fi
	[ $rc -eq 0 ] || printf 'error: unknown argument %s\n' "$1" >&2
	exit $rc
}

# Seconds since the epoch, for stage timings.
now() { date +%s; }

# Stage timing: `stage_begin NAME` ... `stage_end`; appends to $ZCRX_CACHE/timings.log.
stage_begin() { _stage_name=$1; _stage_t0=$(now); msg "stage: $1"; }
stage_end() {
	local dt=$(( $(now) - _stage_t0 ))
	mkdir -p "$ZCRX_CACHE"
	printf '%s %-16s %5ds\n' "$(date -u +%FT%TZ)" "$_stage_name" "$dt" >> "$ZCRX_CACHE/timings.log"
	msg "stage $_stage_name done in ${dt}s"
}

# Locks on the cache, held until the calling script exits:
#  - one per output directory (build-fast, build-debug, tools, toolchain):
#    two builds into one directory corrupt each other (seen: "fixdep: error
#    opening file: io_uring/.kbuf.o.d"); a second build waits and says so.
#    Builds into different directories (the fast and the debug kernel) may
#    run at once: make check builds the debug kernel while the fast suite runs.
#  - source.lock on the shared kernel tree: shared while a build reads it,
#    exclusive while scripts/kernel.sh unpacks or patches it.
cache_lock() {
	local name=${1:?cache_lock needs a name}
	mkdir -p "$ZCRX_CACHE"
	exec 9>"$ZCRX_CACHE/$name.lock"
	if ! flock -n 9; then
		msg "another build is using $ZCRX_CACHE ($name.lock); waiting for it"
		flock 9
	fi
}
source_lock() {
	local mode=-s
	[ "${1:?source_lock shared|exclusive}" = exclusive ] && mode=-x
	mkdir -p "$ZCRX_CACHE"
	[ -n "${_source_lock_open:-}" ] || { exec 8>"$ZCRX_CACHE/source.lock"; _source_lock_open=1; }
	if ! flock -n $mode 8; then
		msg "waiting for the kernel tree (source.lock, $1)"
		flock $mode 8
	fi
}

# The environment every kernel and module build needs.
kbuild_env() {
	export LLVM=$LLVM_SUFFIX
	export LIBCLANG_PATH=/usr/lib/llvm${LLVM_SUFFIX}/lib
	export RUST_LIB_SRC
	RUST_LIB_SRC=$(cat "$ZCRX_CACHE/rust-lib-src" 2>/dev/null) ||
		die "rust-src is not set up; run scripts/toolchain.sh"
	export PATH=$HOME/.cargo/bin:$PATH
}

# Hash of the inputs that define a kernel build (patch series + config fragments).
series_hash() {
	(cd "$PATCHES_DIR" && cat series $(grep -v '^#' series 2>/dev/null)) |
		sha256sum | cut -c1-12
}
# The config fragments of a flavour, in order: base.config and its own; the
# pristine kernel (the release without the series, make tree-tests'
# baseline) has the fast flavour's options.
config_frags() {
	local d=$ZCRX_TOP/scripts/config
	case $1 in
	pristine) echo "$d/base.config $d/fast.config $d/pristine.config" ;;
	*) echo "$d/base.config $d/$1.config" ;;
	esac
}
config_hash() {
	# shellcheck disable=SC2046 # a list of paths without spaces
	cat $(config_frags "$1") | sha256sum | cut -c1-12
}
kernel_version_file() { echo "$KLINUX/version"; }
build_dir() { echo "$KBUILDS/$1"; }
# git in the kernel tree $SRC (the caller's), with an identity for the
# series commits and without the lock fds.
git_src() { git -C "$SRC" -c gc.auto=0 -c user.name=zcrx-rs -c user.email=zcrx-rs@localhost "$@" 8>&- 9>&-; }
# "NNNN-slug.patch" -> "slug.patch": a patch's name without its place.
slug() { echo "${1#[0-9][0-9][0-9][0-9]-}"; }
