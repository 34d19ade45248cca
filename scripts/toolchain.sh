#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Install and download everything needed to build the zcrx-rs kernel, module
# and tools on Debian 12 (bookworm). Idempotent: a second run takes seconds.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

# The bookworm packages step 1 installs (also listed by --help).
PKGS="clang-19 libclang-19-dev lld-19 llvm-19 flex bison bc libelf-dev libssl-dev
      cpio kmod udev rsync iproute2 ethtool qemu-system-x86 python3-pip python3-venv
      linux-perf python3-yaml python3-jsonschema git make gcc xz-utils socat
      iputils-ping pkgconf curl iperf3 netsniff-ng python3-docutils man-db"

usage() {
	cat <<USAGE
usage: scripts/toolchain.sh [--help]

Sets up, in this order (each step is skipped when already done):
  1. bookworm packages (apt-get install -t bookworm only):
$(echo $PKGS | fold -s -w 70 | sed 's/ *$//; s/^/     /')
     (udev: without it virtme-ng loses the guest's exit code; python3-yaml,
     python3-jsonschema: the kernel tree's YNL client; linux-perf: make bench
     --profile; iperf3, netsniff-ng, socat, iputils-ping: the tests;
     python3-docutils, man-db: libzcrx's man page and its check)
  2. a private apt configuration under \$ZCRX_CACHE/apt that knows the extra
     suites ($EXTRA_SUITES) for *download only*. The system's apt sources are
     never touched; the private config also pins those suites at -1, so
     nothing can be installed or upgraded from them even by accident.
  3. rust-src equal to \`rustc --version\` (downloaded + unpacked), linux-source-KVER (7.2, or 7.3 with KVER=7.3)
     (pinned: ${KERNEL_DEB_VERSIONS%% *}, with fallbacks), liburing-dev (for the
     in-tree io_uring zcrx selftest program), ethtool (a current one for the
     tree's own selftests; bookworm's cannot set header split)
  4. bindgen-cli $BINDGEN_VERSION (cargo install --locked)
  5. virtme-ng $VIRTME_NG_VERSION (PyPI, in a venv under \$ZCRX_CACHE/venv)

Cache: \$ZCRX_CACHE (now: $ZCRX_CACHE)
USAGE
}
[ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ] && { usage; exit 0; }
[ $# -eq 0 ] || { usage >&2; exit 2; }

mkdir -p "$ZCRX_CACHE"
cache_lock toolchain
stage_begin toolchain

SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo

# --- 1. bookworm packages -------------------------------------------------
. /etc/os-release
[ "${VERSION_CODENAME:-}" = bookworm ] ||
	warn "this is $PRETTY_NAME, not Debian 12 (bookworm); continuing, package names may differ"

missing=
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
		missing="$missing $p"
done
if [ -n "$missing" ]; then
	msg "installing from bookworm:$missing"
	$SUDO apt-get update -qq ||
		die "apt-get update failed; check network access to the Debian mirror"
	# -t bookworm: never take anything from another suite, whatever the
	# machine's sources say.
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -t bookworm $missing ||
		die "apt-get install -t bookworm$missing failed (see above)"
fi
# virtme-ng loses the guest's exit code without udevd on the host (notes/vm.md).
command -v udevadm >/dev/null || die "udev is not installed; vng cannot propagate exit codes"

# --- 2. private apt configuration for download-only suites ----------------
mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/cache/archives/partial" "$APT_DIR/prefs.d"
: > "$APT_DIR/sources.list.new"
for s in $EXTRA_SUITES; do
	echo "deb $DEBIAN_MIRROR $s main" >> "$APT_DIR/sources.list.new"
	printf 'Package: *\nPin: release n=%s\nPin-Priority: -1\n\n' "$s" >> "$APT_DIR/prefs.d/zcrx-download-only.new"
done
mv "$APT_DIR/sources.list.new" "$APT_DIR/sources.list"
mv "$APT_DIR/prefs.d/zcrx-download-only.new" "$APT_DIR/prefs.d/zcrx-download-only"
apt_lists_fresh() { [ -n "$(find "$APT_DIR/lists" -name '*_Packages' -mmin -1440 2>/dev/null | head -1)" ]; }
apt_update_x() {
	msg "updating the private download-only package lists ($EXTRA_SUITES)"
	apt_x update >/dev/null || die "apt-get update of $EXTRA_SUITES failed (private config in $APT_DIR)"
}
versions_of() { apt-cache "${APT_OPTS[@]}" madison "$1" 2>/dev/null | awk -F'|' '{gsub(/ /,"",$2); print $2}'; }

# Download PKG=VER into DIR (once) and unpack it there. Prints the .deb path.
fetch_deb() {
	local pkg=$1 ver=$2 dir=$3 deb
	mkdir -p "$dir"
	deb=$(ls "$dir"/"${pkg}"_*.deb 2>/dev/null | head -1 || true)
	if [ -z "$deb" ]; then
		(cd "$dir" && apt_x download "$pkg=$ver" >/dev/null) ||
			return 1
		deb=$(ls "$dir"/"${pkg}"_*.deb | head -1)
	fi
	if [ ! -e "$dir/.unpacked" ]; then
		dpkg-deb -x "$deb" "$dir/root" || die "dpkg-deb -x $deb failed"
		touch "$dir/.unpacked"
	fi
}

need_download=
rustc_ver=$(rustc --version 2>/dev/null | awk '{print $2}') ||
	die "rustc not found; the machine's rustup toolchain must be on PATH"
[ -e "$ZCRX_CACHE/rust-src/$rustc_ver/.unpacked" ] || need_download=1
[ -e "$KLINUX/.unpacked" ] || need_download=1
[ -e "$ZCRX_CACHE/liburing/.unpacked" ] || need_download=1
[ -e "$ZCRX_CACHE/ethtool/.unpacked" ] || need_download=1
if [ -n "$need_download" ] && ! apt_lists_fresh; then
	apt_update_x
fi

# --- 3a. rust-src matching rustc exactly ----------------------------------
if [ ! -e "$ZCRX_CACHE/rust-src/$rustc_ver/.unpacked" ]; then
	cand=$(versions_of rust-src | grep "^${rustc_ver}${RUST_SRC_DEB_PREFIX}" | head -1 || true)
	[ -n "$cand" ] || die "no rust-src for rustc $rustc_ver in $EXTRA_SUITES (available: $(versions_of rust-src | tr '\n' ' ')).
The kernel needs rust-src whose version equals rustc's exactly: rustc is $rustc_ver."
	msg "rust-src $cand (rustc is $rustc_ver)"
	fetch_deb rust-src "$cand" "$ZCRX_CACHE/rust-src/$rustc_ver" || die "download of rust-src=$cand failed"
fi
lib=$ZCRX_CACHE/rust-src/$rustc_ver/root/usr/src/rustc-$rustc_ver/library
[ -d "$lib/core" ] || die "rust-src for $rustc_ver unpacked, but $lib/core is missing"
echo "$lib" > "$ZCRX_CACHE/rust-lib-src"

# --- 3b. linux-source-$KVER (7.2 unless KVER=7.3) ------------------------
if [ ! -e "$KLINUX/.unpacked" ]; then
	avail=$(versions_of $KSRC_PKG)
	chosen=
	for v in $KERNEL_DEB_VERSIONS; do
		if echo "$avail" | grep -qxF "$v"; then chosen=$v; break; fi
		warn "$KSRC_PKG=$v is not on the mirror any more; trying the next pinned version"
	done
	[ -n "$chosen" ] || die "none of the pinned $KSRC_PKG versions ($KERNEL_DEB_VERSIONS) is available; the mirror has: $(echo $avail)
Add one of those to KERNEL_DEB_VERSIONS in scripts/lib.sh after checking the patch series applies."
	msg "$KSRC_PKG $chosen (~160 MB)"
	rm -rf "$KLINUX"
	fetch_deb $KSRC_PKG "$chosen" "$KLINUX" || die "download of $KSRC_PKG=$chosen failed"
	echo "$chosen" > "$KLINUX/deb-version"
fi
ls "$KLINUX"/root/usr/src/$KSRC_PKG.tar.* >/dev/null 2>&1 ||
	die "$KSRC_PKG unpacked, but no usr/src/$KSRC_PKG.tar.* inside"

# The kernel tree is unpacked (~1 min, mostly one core) while bindgen
# compiles below: on a fresh machine the two overlap.
unpack_pid=
if [ "$(cat "$KLINUX/src/.git/zcrx-deb-version" 2>/dev/null)" != "$(cat "$KLINUX/deb-version")" ]; then
	msg "unpacking the kernel tree in the background (log: $KLINUX/unpack.log)"
	"$ZCRX_TOP/scripts/kernel.sh" --flavour fast source > "$KLINUX/unpack.log" 2>&1 9>&- &
	unpack_pid=$!
	trap '[ -z "$unpack_pid" ] || kill "$unpack_pid" 2>/dev/null' EXIT
fi

# --- 3c. liburing-dev (for the kernel's iou-zcrx selftest program) ---------
if [ ! -e "$ZCRX_CACHE/liburing/.unpacked" ]; then
	avail=$(versions_of liburing-dev)
	chosen=
	for v in $LIBURING_DEB_VERSIONS; do
		echo "$avail" | grep -qxF "$v" && { chosen=$v; break; }
	done
	[ -n "$chosen" ] || chosen=$(echo "$avail" | head -1)
	[ -n "$chosen" ] || die "liburing-dev is not available in $EXTRA_SUITES"
	msg "liburing-dev $chosen"
	fetch_deb liburing-dev "$chosen" "$ZCRX_CACHE/liburing" || die "download of liburing-dev=$chosen failed"
fi

# --- 3d. a current ethtool (the tree's selftests; scripts/tree-tests.sh) ---
if [ ! -e "$ZCRX_CACHE/ethtool/.unpacked" ]; then
	avail=$(versions_of ethtool)
	chosen=
	for v in $ETHTOOL_DEB_VERSIONS; do
		echo "$avail" | grep -qxF "$v" && { chosen=$v; break; }
	done
	[ -n "$chosen" ] || chosen=$(echo "$avail" | head -1)
	[ -n "$chosen" ] || die "ethtool is not available in $EXTRA_SUITES"
	msg "ethtool $chosen (download only, run from $ZCRX_CACHE/ethtool)"
	fetch_deb ethtool "$chosen" "$ZCRX_CACHE/ethtool" || die "download of ethtool=$chosen failed"
	"$ZCRX_CACHE/ethtool/root/usr/sbin/ethtool" --version >/dev/null ||
		die "the downloaded ethtool does not run on this system"
fi

# --- 4. bindgen -------------------------------------------------------------
export PATH=$HOME/.cargo/bin:$PATH
if [ "$(bindgen --version 2>/dev/null | awk '{print $2}')" != "$BINDGEN_VERSION" ]; then
	msg "cargo install bindgen-cli $BINDGEN_VERSION (~2 min)"
	cargo install --locked --quiet bindgen-cli --version "$BINDGEN_VERSION" ||
		die "cargo install bindgen-cli --version $BINDGEN_VERSION failed (needs crates.io)"
fi

# --- 5. virtme-ng -----------------------------------------------------------
VENV=$ZCRX_CACHE/venv
if [ "$("$VENV/bin/vng" --version 2>/dev/null | awk '{print $2}')" != "$VIRTME_NG_VERSION" ]; then
	msg "virtme-ng $VIRTME_NG_VERSION from PyPI into $VENV"
	python3 -m venv --system-site-packages "$VENV" || die "python3 -m venv failed (python3-venv installed?)"
	"$VENV/bin/pip" install -q "virtme-ng==$VIRTME_NG_VERSION" ||
		die "pip install virtme-ng==$VIRTME_NG_VERSION failed (needs PyPI)"
fi

if [ -n "$unpack_pid" ] && ! wait "$unpack_pid"; then
	warn "unpacking the kernel tree failed (log: $KLINUX/unpack.log); scripts/kernel.sh will retry"
fi
unpack_pid=
stage_end
msg "toolchain ready: rustc $rustc_ver, rust-src $lib, bindgen $(bindgen --version | awk '{print $2}'), vng $("$VENV/bin/vng" --version | awk '{print $2}')"
