#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Runs inside the test VM (scripts/check.sh): the module's KUnit suites, then
# the selftest. Everything printed here is KTAP or a "# " diagnostic.
set -u
B=${ZCRX_BUILD:?run through scripts/vm.sh}
TOP=$(cd "$(dirname "$0")/.." && pwd)
# ZCRX_KO: another build of the module (scripts/mutants.sh); ZCRX_FAIL_FAST:
# stop the selftest at its first failed test.
KO=${ZCRX_KO:-$B/zcrx-module/rust/zcrx_rs.ko}
# ZCRX_SELFTEST: a snapshot of the tools (scripts/mutants.sh), so that a
# rebuild on the host during a long run cannot change them under it.
SELFTEST=${ZCRX_SELFTEST:-$TOP/tools/target/release/zcrx-selftest}
rc=0

# KUnit: the test build of the module carries its suites; they run on load
# (kunit.enable=1 kunit.autorun=1) and leave their KTAP in debugfs until the
# module goes. Flatten them into one KTAP document, one line per case (a
# case's "# SKIP" kept, so that it counts as a skip), and fail a suite
# whose cases did not all run, and every case that rust/ declares (a
# `#[test]` in a `#[kunit_tests(...)]` module) and that did not run (a
# kunit.filter_glob, a case compiled out: the suite's own plan would not
# show it). POSIX awk only: the guest has mawk (no ENDFILE), so a suite is
# closed when the next file begins and at the end.
kunit_ktap() {
	awk -v want="$(kunit_source_cases)" '
	function close_suite() {
		if (suite != "" && (plan < 0 || ran != plan)) {
			res[++n] = "not ok " n " kunit." suite " (ran " ran " of " plan " cases)"
			failed = 1
		}
	}
	FNR == 1 {
		close_suite()
		suite = FILENAME; sub(/\/results$/, "", suite); sub(/.*\//, "", suite); plan = -1; ran = 0
	}
	/^    1\.\.[0-9]+$/ { plan = substr($1, 4) + 0 }
	/^    (not )?ok [0-9]+ / {
		ran++
		notok = ($1 == "not")
		name = notok ? $4 : $3
		skip = ""
		if (match($0, /# SKIP.*/)) skip = " " substr($0, RSTART, RLENGTH)
		res[++n] = (notok ? "not ok " : "ok ") n " kunit." suite "." name skip
		seen[suite "." name] = 1
		if (notok) failed = 1
	}
	/^    # / && !/\.speed: / && !/# speed: / { res[++n] = ""; n--; diag[n] = diag[n] "\n# " substr($0, 7) }
	END {
		close_suite()
		nw = split(want, w, " ")
		for (i = 1; i <= nw; i++) if (!(w[i] in seen)) {
			res[++n] = "not ok " n " kunit." w[i] " (declared in rust/, did not run)"
			failed = 1
		}
		print "TAP version 13"; print "1.." n
		for (i = 1; i <= n; i++) {
			if (diag[i - 1] != "" && i > 0) printf "%s\n", substr(diag[i - 1], 2)
			print res[i]
			if (res[i] ~ /^not ok/) nf++
			else if (res[i] ~ /# SKIP/) ns++
			else np++
		}
		printf "# Totals: pass:%d fail:%d xfail:0 xpass:0 skip:%d error:0\n", np, nf, ns
		exit failed
	}' "$@"
}

# SUITE.CASE of every KUnit case the module's source declares: the fn after
# each #[test] in a file with #[kunit_tests(SUITE)] (one suite per file).
kunit_source_cases() {
	local f
	grep -rl 'kunit_tests(zcrx_rs_' "$TOP/rust" | sort | while read -r f; do
		awk '
		match($0, /kunit_tests\(zcrx_rs_[a-z0-9_]+\)/) { suite = substr($0, RSTART + 12, RLENGTH - 13) }
		/^[ \t]*#\[test\]/ { t = 1; next }
		t && match($0, /fn [a-z0-9_]+/) { printf "%s.%s ", suite, substr($0, RSTART + 3, RLENGTH - 3); t = 0 }' "$f"
	done
}

# Every suite the module's source declares must have run.
kunit_suites_present() {
	local s r=0
	for s in $(grep -rhoE 'kunit_tests\(zcrx_rs_[a-z0-9_]+\)' "$TOP/rust" | sed 's/.*(\(.*\))/\1/' | sort -u); do
		if [ ! -e "/sys/kernel/debug/kunit/$s/results" ]; then
			echo "# kunit: suite $s (in rust/) did not run"
			r=1
		fi
	done
	return $r
}

echo "# kunit: loading $KO"
if insmod "$KO"; then
	set -- /sys/kernel/debug/kunit/zcrx_rs_*/results
	if [ -e "$1" ]; then
		kunit_ktap "$@" || rc=1
		kunit_suites_present || rc=1
	else
		echo "TAP version 13"; echo "1..1"
		echo "not ok 1 kunit (no zcrx_rs suites in debugfs: not a test build, or kunit not enabled)"
		rc=1
	fi
	rmmod zcrx_rs || { echo "# kunit: rmmod zcrx_rs failed"; rc=1; }
else
	echo "TAP version 13"; echo "1..1"; echo "not ok 1 kunit_module_load"
	rc=1
fi

# --fail-fast (mutants): a failed KUnit case is enough.
[ -z "${ZCRX_FAIL_FAST:-}" ] || [ $rc -eq 0 ] || exit $rc
# shellcheck disable=SC2086 # SELFTEST_ARGS is a list of arguments
"$SELFTEST" --module "$KO" ${ZCRX_FAIL_FAST:+--fail-fast} ${SELFTEST_ARGS:-} || rc=1
exit $rc
