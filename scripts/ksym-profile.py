#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Where sampled kernel addresses fall, out-of-tree modules included.

perf in the test guest leaves the samples of a module it cannot find on
disk as [unknown]; /proc/kallsyms lists the module's symbols all the same
(kptr_restrict 0). Reads `perf script -F ip,sym` lines on stdin (or `-F
comm,ip,sym` with COMM_PREFIX: only samples of tasks whose name starts
with it), maps every address through /proc/kallsyms and prints the symbols
with their share of the samples, most first.
Usage: perf script ... | ksym-profile.py [TOP [COMM_PREFIX]]
"""
import bisect
import sys


def main():
    top = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    comm = sys.argv[2] if len(sys.argv) > 2 else None
    addrs, names = [], []
    with open("/proc/kallsyms") as f:
        for line in f:
            parts = line.split()
            if len(parts) < 3 or parts[1] not in "tTwW":
                continue
            a = int(parts[0], 16)
            if a == 0:
                continue
            mod = parts[3] if len(parts) > 3 else ""
            addrs.append(a)
            names.append(parts[2] + (" " + mod if mod else ""))
    order = sorted(range(len(addrs)), key=addrs.__getitem__)
    addrs = [addrs[i] for i in order]
    names = [names[i] for i in order]
    counts, total = {}, 0
    for line in sys.stdin:
        parts = line.split()
        if comm is not None:
            if not parts or not parts[0].startswith(comm):
                continue
            parts = parts[1:]
        if not parts:
            continue
        try:
            ip = int(parts[0], 16)
        except ValueError:
            continue
        total += 1
        if ip < 0x8000000000000000:
            name = "[user] " + (" ".join(parts[1:]) or "?")
        else:
            i = bisect.bisect_right(addrs, ip) - 1
            name = names[i] if i >= 0 else "?"
        counts[name] = counts.get(name, 0) + 1
    print(f"# {total} samples")
    for name, n in sorted(counts.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{100.0 * n / max(total, 1):6.2f}% {n:7d}  {name}")


if __name__ == "__main__":
    main()
