#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Boot the zcrx-rs test kernel in QEMU with virtme-ng, run one command inside,
# propagate its exit code, save and scan the guest's kernel log.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() {
	cat <<USAGE
usage: scripts/vm.sh [options] [--] COMMAND [ARGS...]

Boots \$ZCRX_CACHE/build/FLAVOUR/arch/x86/boot/bzImage with virtme-ng (host
root filesystem, read-only copy-on-write), runs COMMAND through
scripts/guest-init.sh, powers off and exits with COMMAND's exit code.

Options:
  --flavour fast|debug  kernel to boot (default: fast)
  --timeout SECONDS     outer timeout for the whole run (default: 600); on
                        expiry the VM is killed and the run fails with 124
  --name NAME           name of the saved kernel log (default: vm)
  --cpus N / --memory M guest size (default: 2 vCPUs, 2G)
  --append ARGS         extra kernel command line
  --rwdir DIR           a host directory the guest may write (e.g. results)
  --no-scan             do not fail on kernel splats (the log is still saved)
  --qemu-opts OPTS      extra QEMU arguments (e.g. "-icount shift=0,sleep=off")

The guest's kernel log is saved to \$ZCRX_CACHE/build/FLAVOUR/vm-logs/NAME.log.
Any WARNING:, BUG:, KASAN:, lockdep report, Oops, panic or kmemleak report in
it fails the run (exit code 3 unless COMMAND itself failed) and is printed.

KVM: /dev/kvm is probed once per machine (a guest must actually boot within
a few seconds); when it does not work, as on these machines, TCG is used.
Set ZCRX_VM_ACCEL=tcg|kvm to skip the probe.
USAGE
}

flavour=fast timeout=600 name=vm cpus=2 memory=2G append= rwdirs=() scan=1 qemu_opts=()
while [ $# -gt 0 ]; do
	case $1 in
	--flavour|--flavor) flavour=$2; shift ;;
	--timeout) timeout=$2; shift ;;
	--name) name=$2; shift ;;
	--cpus) cpus=$2; shift ;;
	--memory) memory=$2; shift ;;
	--append) append="$append $2"; shift ;;
	--rwdir) rwdirs+=("--rwdir=$2"); shift ;;
	--no-scan) scan= ;;
	--qemu-opts) qemu_opts+=("--qemu-opts=$2"); shift ;;
	-h|--help) usage; exit 0 ;;
	--) shift; break ;;
	-*) usage >&2; die "unknown option $1" ;;
	*) break ;;
	esac
	shift
done
[ $# -gt 0 ] || { usage >&2; die "no command to run in the guest"; }

B=$(build_dir "$flavour")
KIMG=$B/arch/x86/boot/bzImage
VNG=$ZCRX_CACHE/venv/bin/vng
[ -x "$VNG" ] || die "virtme-ng is not installed; run scripts/toolchain.sh"
# vng runs virtme-run & co. from PATH.
export PATH=$ZCRX_CACHE/venv/bin:$PATH
[ -f "$KIMG" ] || die "no kernel at $KIMG; run scripts/kernel.sh --flavour $flavour"
mkdir -p "$B/vm-logs"
LOG=$B/vm-logs/$name.log

# The guest runs the host's root filesystem, so it needs the host's udevd
# stack for virtme-ng's script I/O ports, and depmod for its module set-up.
command -v udevadm >/dev/null || die "udev is missing on the host: virtme-ng would lose the exit code (scripts/toolchain.sh installs it)"

probe_kvm() {
	local verdict=$ZCRX_CACHE/kvm-verdict key
	key="$(uname -r) $(qemu-system-x86_64 --version | head -1)"
	if [ -f "$verdict" ] && [ "$(sed -n 1p "$verdict")" = "$key" ]; then
		sed -n 2p "$verdict"; return
	fi
	local v=tcg
	if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
		msg "probing KVM (a guest must boot within 30 s; result cached in $verdict)"
		if timeout --kill-after=5 30 "$VNG" --run "$KIMG" --cpus 1 --memory 512M \
			--exec 'exit 7' </dev/null >/dev/null 2>&1; then :; else
			[ $? -eq 7 ] && v=kvm
		fi
	fi
	printf '%s\n%s\n' "$key" "$v" > "$verdict"
	echo "$v"
}
accel=${ZCRX_VM_ACCEL:-$(probe_kvm)}
accel_args=()
[ "$accel" = kvm ] || accel_args=(--disable-kvm)

# Keep the command's arguments intact through vng's --exec string.
cmd=$(printf '%q ' "$@")
msg "VM ($flavour, $accel${qemu_opts[*]:+ ${qemu_opts[*]#--qemu-opts=}}, ${cpus} vCPUs, $memory, timeout ${timeout}s): $*"
rc=0
# --verbose sends the kernel console to our stderr, which goes to $LOG;
# guest-init.sh sends the command's stderr to stdout, so it is not lost in there.
# no5lvl: QEMU's "-cpu max" has LA57, and 7.2 with KASAN then reports a
# wild-memory-access at boot now and then (2 of 11 saved guest logs): identify_cpu()
# clears boot_cpu_data's capabilities, pgtable_l5_enabled() reads false until
# CPUID is read again, and an interrupt in between makes KASAN compute its
# shadow range for 4-level paging. Not ours to fix here; 4-level avoids it.
timeout --kill-after=10 "$timeout" "$VNG" --run "$KIMG" "${accel_args[@]}" \
	--cpus "$cpus" --memory "$memory" --verbose --cwd "$ZCRX_TOP" "${rwdirs[@]}" "${qemu_opts[@]}" \
	--append "panic_on_warn=0 oops=panic no5lvl $append" \
	--exec "ZCRX_CACHE=$ZCRX_CACHE ZCRX_FLAVOUR=$flavour ZCRX_BUILD=$B bash $ZCRX_TOP/scripts/guest-init.sh $cmd" \
	</dev/null 2> "$LOG" || rc=$?
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
	tail -30 "$LOG" >&2
	die "VM timed out after ${timeout}s (kernel log above, in full in $LOG); raise --timeout or look for a hang"
fi

splat=0
if [ -n "$scan" ]; then
	pat='WARNING:|BUG:|KASAN:|UBSAN:|Oops|general protection fault|Kernel panic|kernel BUG|possible circular locking|possible recursive locking|inconsistent lock state|suspicious RCU usage|unreferenced object|suspected memory leak|hung_task|soft lockup|refcount_t:'
	if grep -E -q "$pat" "$LOG"; then
		splat=1
		printf '\n==> kernel splat in the guest log (%s):\n' "$LOG" >&2
		grep -E -A25 "$pat" "$LOG" | head -120 >&2
	fi
fi
if [ $rc -eq 255 ] && ! grep -q 'zcrx-guest: exit' "$LOG" 2>/dev/null; then
	tail -30 "$LOG" >&2
	die "virtme-ng failed (exit 255) before the command ran; kernel log above and in $LOG"
fi
msg "guest kernel log: $LOG"
if [ $rc -eq 0 ] && [ $splat -eq 1 ]; then
	printf 'error: %s\n' "the command passed but the kernel complained (see above): failing the run" >&2
	exit 3
fi
exit $rc
