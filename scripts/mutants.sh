#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# `make mutants`: mutation testing of the module. Each mutant in
# scripts/mutants.txt plants one deliberate bug in a copy of rust/; the
# copy is built (KUnit build, as make check's) against the FLAVOUR kernel and
# the whole suite (guest-tests.sh: KUnit, then zcrx-selftest) runs against it
# in its own VM. A mutant is killed when a test fails, the VM finds a kernel
# splat or the VM times out. Every mutant must be killed: one that survives
# is a bug the suite cannot see, and the run fails.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() {
	cat <<USAGE
usage: scripts/mutants.sh [--flavour fast|debug] [--fail-fast] [--no-control] [--timeout S] [run] [NAME...]
       scripts/mutants.sh list
       scripts/mutants.sh apply NAME DIR     write the mutated source tree to DIR
       scripts/mutants.sh build NAME         apply and build it (prints the .ko)
       scripts/mutants.sh table [MATRIX]     the kill table of a run, in RST

run (the default): every mutant of scripts/mutants.txt, or the NAMEs given,
one VM each, the whole suite (--fail-fast: stop a mutant's suite at its
first failed test; quicker, but the matrix then shows only that test).
First a control run: the unmutated module must pass the same suite, or
the run stops (--no-control skips it). A VM that fails without a failed
test, splat or timeout is an error, not a kill; errors fail the run.
Results in \$ZCRX_CACHE/build/FLAVOUR/mutants/: one log per mutant,
matrix.tsv (mutant, verdict, killing tests) and summary.txt. The last line
is "N killed, N survived, N not built, N errors".

scripts/mutants.txt: blocks of
  [name]
  why: the bug it plants (one line)
  file: rust/PATH.rs
  from: text that occurs exactly once in the file
  to: what replaces it
(from/to are single lines, taken verbatim after "from: "/"to: "; several
from/to pairs make one mutant).
USAGE
}

LIST=${ZCRX_MUTANTS:-$ZCRX_TOP/scripts/mutants.txt}
flavour=fast fail_fast= timeout=1500 no_control=
while [ $# -gt 0 ]; do
	case $1 in
	--flavour|--flavor) flavour=$2; shift ;;
	--fail-fast) fail_fast=1 ;;
	--no-control) no_control=1 ;;
	--timeout) timeout=$2; shift ;;
	-h|--help) usage; exit 0 ;;
	-*) usage >&2; exit 2 ;;
	*) break ;;
	esac
	shift
done
cmd=${1:-run}
[ $# -eq 0 ] || shift

# The list, parsed: apply NAME DIR copies the module's source to DIR and
# applies the mutant; every from must match exactly once, or it fails.
mutants_py() {
	python3 - "$LIST" "$ZCRX_TOP" "$@" <<'PY'
import os, shutil, sys

def parse(path):
    muts, cur = [], None
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.rstrip("\n")
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            cur = {"name": line[1:-1], "why": "", "file": None, "edits": [], "line": n}
            muts.append(cur)
            continue
        if cur is None:
            sys.exit(f"{path}:{n}: text before the first [name]")
        key, sep, val = line.partition(": ")
        if not sep:
            sys.exit(f"{path}:{n}: expected 'key: value'")
        if key == "why":
            cur["why"] = val
        elif key == "file":
            cur["file"] = val
        elif key == "from":
            cur["edits"].append([val, None])
        elif key == "to":
            if not cur["edits"] or cur["edits"][-1][1] is not None:
                sys.exit(f"{path}:{n}: 'to' without its 'from'")
            cur["edits"][-1][1] = val
        else:
            sys.exit(f"{path}:{n}: unknown key {key}")
    names = set()
    for m in muts:
        if m["name"] in names:
            sys.exit(f"{path}:{m['line']}: mutant {m['name']} defined twice")
        names.add(m["name"])
        if not m["file"] or not m["edits"] or not m["why"] or any(t is None for _, t in m["edits"]):
            sys.exit(f"{path}:{m['line']}: mutant {m['name']} needs why, file, from and to")
    return muts

listf, top, cmd, *args = sys.argv[1:]
muts = parse(listf)
if cmd == "list":
    for m in muts:
        print(f"{m['name']}\t{m['file']}\t{m['why']}")
elif cmd == "table":
    # The kill table for Documentation/zcrx-rs.rst, from a run's matrix.tsv.
    (matrix,) = args
    got = {}
    for line in open(matrix, encoding="utf-8"):
        name, verdict, killers = line.rstrip("\n").split("\t")
        got[name] = (verdict, killers)
    print(".. list-table::")
    print("   :header-rows: 1")
    print("   :widths: 22 48 30")
    print()
    print("   * - mutant (file)")
    print("     - the bug planted")
    print("     - killed by (first failed test)")
    for m in muts:
        verdict, killers = got.get(m["name"], ("not run", "-"))
        if verdict != "killed":
            killers = f"**{verdict.upper()}** {killers}"
        print(f"   * - ``{m['name']}`` ({m['file'].removeprefix('rust/')})")
        print(f"     - {m['why']}")
        print(f"     - {killers.replace(',', ', ')}")
elif cmd == "apply":
    name, dest = args
    m = next((m for m in muts if m["name"] == name), None)
    if m is None:
        sys.exit(f"no mutant {name} in {listf}")
    if os.path.exists(dest):
        shutil.rmtree(dest)
    os.makedirs(dest)
    shutil.copy(os.path.join(top, "Kbuild"), dest)
    shutil.copytree(os.path.join(top, "rust"), os.path.join(dest, "rust"))
    shutil.copytree(os.path.join(top, "tools", "include"), os.path.join(dest, "tools", "include"))
    path = os.path.join(dest, m["file"])
    src = open(path, encoding="utf-8").read()
    for frm, to in m["edits"]:
        c = src.count(frm)
        if c != 1:
            sys.exit(f"mutant {name}: '{frm}' occurs {c} times in {m['file']} (must be once)")
        src = src.replace(frm, to)
    open(path, "w", encoding="utf-8").write(src)
else:
    sys.exit(f"unknown command {cmd}")
PY
}

B=$(build_dir "$flavour")
OUT=$B/mutants

# build NAME: the mutated tree and its KUnit build under $OUT/NAME; prints
# the .ko's path. A mutant that does not build is a broken list entry.
# The source is $BASE: the repository, or in `run` a copy taken at the start.
BASE=$ZCRX_TOP
build_mutant() {
	local name=$1 dir=$OUT/$1
	ZCRX_TOP=$BASE mutants_py apply "$name" "$dir/src" || return 1
	build_tree "$dir/src" "$dir"
}

# build_tree SRC DIR: the KUnit build of the module in SRC, into DIR/build;
# prints the .ko's path.
build_tree() {
	kbuild_env
	make -s -C "$B" M="$1" MO="$2/build" ZCRX_KUNIT=1 modules > "$2/build.log" 2>&1 ||
		{ tail -20 "$2/build.log" >&2; return 1; }
	echo "$2/build/rust/zcrx_rs.ko"
}

case $cmd in
list) mutants_py list; exit 0 ;;
table) mutants_py table "${1:-$OUT/matrix.tsv}"; exit 0 ;;
apply) [ $# -eq 2 ] || { usage >&2; exit 2; }; mutants_py apply "$1" "$2"; exit 0 ;;
build) [ $# -eq 1 ] || { usage >&2; exit 2; }; mkdir -p "$OUT/$1"; build_mutant "$1"; exit 0 ;;
run) ;;
*) usage >&2; exit 2 ;;
esac

[ -f "$B/arch/x86/boot/bzImage" ] || die "no $flavour kernel; run make kernel FLAVOUR=$flavour"
[ -x "$ZCRX_TOP/tools/target/release/zcrx-selftest" ] || die "no zcrx-selftest; run make tools"
mkdir -p "$OUT"
if [ $# -gt 0 ]; then
	names=("$@")
else
	all=$(mutants_py list) || die "$LIST does not parse"
	mapfile -t names < <(printf '%s\n' "$all" | cut -f1)
fi
total=${#names[@]}
[ "$total" -gt 0 ] && [ -n "${names[0]}" ] || die "no mutants to run"
# Short soak and fuzz runs: a mutant is about the module's logic, and the
# full suite is run once per mutant.
SARGS="--soak-seconds 10 --fuzz-seconds 8"
[ "$flavour" = debug ] && SARGS="$SARGS --scale-down 8 --big-stream 16777216"
# The module's source and the tools as they are now, for the whole run (the selftest finds its
# helper programs next to itself and libzcrx at ../libzcrx/prefix/lib).
snap=$OUT/tools
rm -rf "$snap"; mkdir -p "$snap/release" "$snap/libzcrx"
find "$ZCRX_TOP/tools/target/release" -maxdepth 1 -type f -perm -u+x -name 'zcrx*' -exec cp {} "$snap/release/" \;
cp -a "$ZCRX_TOP/tools/target/libzcrx/prefix" "$snap/libzcrx/"
BASE=$OUT/base
rm -rf "$BASE"; mkdir -p "$BASE/tools"
cp -a "$ZCRX_TOP/Kbuild" "$ZCRX_TOP/rust" "$BASE/"
cp -a "$ZCRX_TOP/tools/include" "$BASE/tools/"
cp "$LIST" "$OUT/mutants.txt"; LIST=$OUT/mutants.txt
: > "$OUT/matrix.tsv"

# run_suite NAME KO: the suite against KO in a VM of its own; sets
# $killers (the failed tests, "(splat)", "(timeout)") and $verdict:
# killed, SURVIVED, or error (the VM or the harness failed without a
# result that names the module: not a kill).
run_suite() {
	local name=$1 ko=$2 log=$OUT/$1.log rc=0
	"$ZCRX_TOP/scripts/vm.sh" --flavour "$flavour" --name "mutant-$name" --timeout "$timeout" \
		--append "kunit.enable=1 kunit.autorun=1" -- \
		env ZCRX_KO="$ko" ZCRX_SELFTEST="$snap/release/zcrx-selftest" ZCRX_FAIL_FAST="$fail_fast" SELFTEST_ARGS="$SARGS" \
		bash "$ZCRX_TOP/scripts/guest-tests.sh" > "$log" 2> "$OUT/$name.vm-err" || rc=$?
	killers=$(sed -n 's/^not ok [0-9]\+ \([^ ]*\).*/\1/p' "$log" | paste -sd, -)
	if grep -q 'VM timed out' "$OUT/$name.vm-err"; then
		killers="${killers:+$killers,}(timeout)"
	elif [ $rc -eq 3 ]; then
		killers="${killers:+$killers,}(splat)"
	fi
	if [ -n "$killers" ]; then
		verdict=killed
	elif [ $rc -eq 0 ] && grep -qE '^# Totals:' "$log"; then
		verdict=SURVIVED
	else
		verdict=error killers="(exit $rc, no failed test: see $OUT/$name.vm-err)"
	fi
}

# The control: the module as it is must pass the same run, or every
# "kill" below could be the suite's own failure.
if [ -z "$no_control" ]; then
	t0=$(now)
	mkdir -p "$OUT/control"
	ko=$(build_tree "$BASE" "$OUT/control") || die "the unmutated module does not build: $OUT/control/build.log"
	run_suite control "$ko"
	[ "$verdict" = SURVIVED ] ||
		die "the suite fails without any mutant ($verdict: $killers; $OUT/control.log): fix that first"
	msg "control: the unmutated module passes ($(( $(now) - t0 )) s)"
fi

killed=0 survived=0 broken=0 errors=0 i=0
for name in "${names[@]}"; do
	i=$((i + 1))
	t0=$(now)
	if ! ko=$(build_mutant "$name" 2> "$OUT/$name.build-err"); then
		broken=$((broken + 1))
		cat "$OUT/$name.build-err" >&2
		printf '%s\tnot-built\t-\n' "$name" >> "$OUT/matrix.tsv"
		msg "[$i/$total] $name: NOT BUILT"
		continue
	fi
	run_suite "$name" "$ko"
	case $verdict in
	killed) killed=$((killed + 1)) ;;
	SURVIVED) survived=$((survived + 1)) ;;
	*) errors=$((errors + 1)) ;;
	esac
	printf '%s\t%s\t%s\n' "$name" "$verdict" "${killers:--}" >> "$OUT/matrix.tsv"
	msg "[$i/$total] $name: $verdict in $(( $(now) - t0 )) s${killers:+ by $killers}"
done

{
	printf '%-34s %-9s %s\n' mutant verdict "killed by"
	awk -F'\t' '{ printf "%-34s %-9s %s\n", $1, $2, $3 }' "$OUT/matrix.tsv"
	echo "$killed killed, $survived survived, $broken not built, $errors errors"
} | tee "$OUT/summary.txt"
[ "$survived" -eq 0 ] && [ "$broken" -eq 0 ] && [ "$errors" -eq 0 ]
