#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Compare the tree selftests' results case by case (scripts/tree-tests.sh).

The guest (scripts/guest-tree-tests.sh) leaves, for each run label (stock,
ours, pristine) and each test, LABEL-TEST.log and LABEL-TEST.rc in LOGDIR;
for the zero-copy tests hw-TEST.{log,rc,dma}. This script reads them and
prints:

  - every case whose result differs between two runs that must agree
    (stock vs ours: netdevsim is the only difference; pristine vs stock:
    the kernel's core patches are the only difference);
  - every case that is not "ok" on all runs (both fail, both skip, both
    time out, a case that did not run): allowed only when the reviewed
    list (scripts/tree-tests-expected.txt) names it with that result;
  - for the zero-copy tests: every case must pass (no skip) and netdevsim
    must have DMA'd at least the payload the test sends into provider
    buffers;

then "tree-tests: N cases same and ok, N ok on ours alone, N allowed not ok,
N differ, N not ok unlisted" and "tree-tests zero-copy: N passed, N failed". Exit status 1 if
anything failed.

With --lazy LABEL (make check's quick run), the guest ran LABEL only for
the tests not ok on "ours" and left LABEL-TEST.lazy for the others: their
cases count as "ok on ours alone" when every one of them is ok on ours,
else as differing. The lazy rule holds for the tests LABEL did run too: a
case ok on ours passes whatever the reference did ("ok on ours alone"
when the two differ); a case not ok on ours must be not ok alike on the
reference and allowed by the list, as without --lazy.

A case is a KTAP result line of the test's output ("ok 3 hds.get_hds",
"not ok 4 ...", "# SKIP" and "# XFAIL" kept as skip and xfail); every test
also has the case "(exit)": its exit status (ok, fail(N), skip, timeout),
with the "PASSED all N checks" count of the netdevsim shell tests. A KTAP
plan with fewer result lines than it announced adds the case "(missing)",
whose result is "missing N of M cases".
"""

import argparse
import os
import re
import sys

CASE = re.compile(r"^(not )?ok (\d+) (\S+)(?: # (SKIP|XFAIL|TODO)\b.*)?$")
PLAN = re.compile(r"^1\.\.(\d+)$")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def logname(test):
    return test.replace("/", "_")


def exit_verdict(rc):
    return {0: "ok", 4: "skip", 124: "timeout"}.get(rc, f"fail({rc})")


def cases(logdir, label, test):
    """{case: verdict} of one run of one test, or None if it did not run."""
    base = os.path.join(logdir, f"{label}-{logname(test)}")
    try:
        with open(base + ".rc") as f:
            rc = int(f.read().strip())
        with open(base + ".log", errors="replace") as f:
            lines = [ANSI.sub("", l.rstrip("\n")) for l in f]
    except (OSError, ValueError):
        return None
    res = {}
    plan = None
    ran = 0
    checks = ""
    for line in lines:
        m = PLAN.match(line)
        if m and plan is None:
            plan = int(m.group(1))
            continue
        m = CASE.match(line)
        if m:
            ran += 1
            name = m.group(3)
            if m.group(4) in ("SKIP", "XFAIL"):
                v = m.group(4).lower()
            else:
                v = "fail" if m.group(1) else "ok"
            # a name printed twice (variants): keep both
            while name in res:
                name += "'"
            res[name] = v
            continue
        m = re.match(r"^(PASSED all \d+ checks|FAILED \d+/\d+ checks)$", line)
        if m:
            checks = f" ({m.group(1)})"
    if plan is not None and ran < plan:
        res["(missing)"] = f"missing {plan - ran} of {plan} cases"
    res["(exit)"] = exit_verdict(rc) + checks
    return res


def load_expected(path):
    """{(test, case): (verdict, reason)} from the reviewed list."""
    exp = {}
    if not path or not os.path.exists(path):
        return exp
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 3)
            if len(parts) < 4:
                sys.exit(f"{path}:{n}: want TEST CASE VERDICT REASON")
            exp[(parts[0], parts[1])] = (parts[2], parts[3])
    return exp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("logdir")
    ap.add_argument("--labels", default="stock,ours",
                    help="runs that must agree, comma-separated (the first is the reference)")
    ap.add_argument("--expected", help="the reviewed list of allowed not-ok cases")
    ap.add_argument("--tests", nargs="*", default=[])
    ap.add_argument("--lazy", default="",
                    help="a label the guest ran only where ours was not ok (LABEL-TEST.lazy)")
    ap.add_argument("--hw", nargs="*", default=[],
                    help="zero-copy tests as TEST=BYTES (payload netdevsim must DMA)")
    a = ap.parse_args()
    labels = a.labels.split(",")
    exp = load_expected(a.expected)
    used = set()

    same = alone = allowed = differ = unlisted = 0
    for t in a.tests:
        runs = {l: cases(a.logdir, l, t) for l in labels}
        lazy = os.path.exists(os.path.join(a.logdir, f"{a.lazy}-{logname(t)}.lazy"))
        if a.lazy and runs.get(a.lazy) is None and lazy:
            ours = runs.get("ours")
            if ours is None:
                print(f"# NOT RUN: {t} on ours (no ours-{logname(t)}.rc in {a.logdir})")
                differ += 1
                continue
            bad = [f"{c} {v}" for c, v in ours.items() if not (v == "ok" or v.startswith("ok "))]
            if bad:
                print(f"# DIFFERS: {t}: {a.lazy} not run although not ok on ours: " + ", ".join(bad))
                differ += 1
            else:
                alone += len(ours)
            continue
        for l, r in runs.items():
            if r is None:
                print(f"# NOT RUN: {t} on {l} (no {l}-{logname(t)}.rc in {a.logdir})")
                differ += 1
        got = {l: r for l, r in runs.items() if r is not None}
        if len(got) < len(labels):
            continue
        names = []
        for r in got.values():
            names += [c for c in r if c not in names]
        for c in names:
            vs = [got[l].get(c, "absent") for l in labels]
            desc = ", ".join(f"{l} {v}" for l, v in zip(labels, vs))
            ours = got.get("ours", {}).get(c, "absent")
            if a.lazy and len(set(vs)) > 1 and (ours == "ok" or ours.startswith("ok ")):
                # the lazy rule, whether or not the reference ran: a case
                # ok on ours passes whatever the reference did
                alone += 1
                continue
            if len(set(vs)) > 1:
                differ += 1
                print(f"# DIFFERS: {t} {c}: {desc}")
                continue
            v = vs[0]
            if v == "ok" or v.startswith("ok "):
                same += 1
                continue
            e = exp.get((t, c))
            if e and e[0] == v.split(" ")[0]:
                used.add((t, c))
                allowed += 1
                print(f"# allowed: {t} {c}: {v} on all ({e[1]})")
            else:
                unlisted += 1
                print(f"# NOT OK: {t} {c}: {desc} (not on {a.expected or 'the list'}"
                      f"{' as ' + e[0] if e else ''})")
    for (t, c), (v, why) in exp.items():
        if t in a.tests and (t, c) not in used:
            print(f"# note: {a.expected} allows {t} {c} {v}, which did not happen: drop it from the list")
    print(f"tree-tests: {same} cases same and ok, {alone} ok on ours alone, {allowed} allowed not ok, "
          f"{differ} differ, {unlisted} not ok unlisted")

    hp = hf = 0
    for spec in a.hw:
        t, want = spec.rsplit("=", 1)
        want = int(want)
        r = cases(a.logdir, "hw", t)
        bad = []
        if r is None:
            bad.append("did not run")
        else:
            for c, v in r.items():
                if not (v == "ok" or v.startswith("ok ")):
                    bad.append(f"{c} {v}")
            if len([c for c in r if not c.startswith("(")]) == 0:
                bad.append("no cases")
        try:
            with open(os.path.join(a.logdir, f"hw-{logname(t)}.dma")) as f:
                dma = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            dma = -1
        if dma < want:
            bad.append(f"netdevsim DMA'd {dma} payload bytes into provider buffers, the test sends {want}")
        ncases = len([c for c in (r or {}) if not c.startswith("(")])
        if bad:
            hf += 1
            print(f"# ZERO-COPY FAILED: {t}: " + "; ".join(bad))
        else:
            hp += 1
            print(f"# zero-copy: {t}: {ncases} cases ok, netdevsim DMA'd {dma} payload bytes"
                  f" into provider buffers (the test sends {want})")
    if a.hw:
        print(f"tree-tests zero-copy: {hp} passed, {hf} failed")
    return 1 if differ or unlisted or hf else 0


if __name__ == "__main__":
    sys.exit(main())
