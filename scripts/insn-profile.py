#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Exact guest instructions per function, from `make bench --insn`.

scripts/qemu-insn-plugin.c writes, for each window the bench marked, one
"<vaddr hex> <instructions>" line per translation block that ran in it
(PREFIX.<n>); the guest wrote what ran in window n to PREFIX.windows
("<n> <mode> <buf_size> <mtu> <json line>") and the kernel's symbols to
PREFIX.kallsyms (the module's again per window, PREFIX.modsyms.<n>: a
reload may move it).

Prints, per window, instructions per 4 KiB of payload: in all, user space,
the kernel, and per kernel function (every thread of the guest: the
receiver, the NAPI threads, the sender); then one table with the modes side
by side. --detail SYMBOL adds the blocks of one function by offset.

usage: insn-profile.py PREFIX [--top N] [--detail SYMBOL]
"""
import bisect
import json
import sys

KERNEL_START = 0xFFFF800000000000


def load_syms(paths):
    syms = []
    for p in paths:
        try:
            f = open(p)
        except OSError:
            continue
        with f:
            for line in f:
                parts = line.split()
                if len(parts) < 3 or parts[1] not in "tTwW":
                    continue
                addr = int(parts[0], 16)
                if addr == 0:
                    continue
                name = parts[2] + (" " + parts[3] if len(parts) > 3 else "")
                syms.append((addr, name))
    syms.sort()
    return [a for a, _ in syms], [n for _, n in syms]


def window(prefix, n, base_paths):
    addrs, names = load_syms(base_paths + [f"{prefix}.modsyms.{n}"])
    per = {}
    blocks = {}
    user = kern = 0
    with open(f"{prefix}.{n}") as f:
        for line in f:
            va, cnt = line.split()
            va, cnt = int(va, 16), int(cnt)
            if va < KERNEL_START:
                user += cnt
                continue
            kern += cnt
            i = bisect.bisect_right(addrs, va) - 1
            name = names[i] if i >= 0 else "?"
            per[name] = per.get(name, 0) + cnt
            blocks.setdefault(name, []).append((va - (addrs[i] if i >= 0 else 0), cnt))
    return user, kern, per, blocks


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    prefix = args[0]
    top = 40
    detail = None
    i = 1
    while i < len(args):
        if args[i] == "--top":
            top = int(args[i + 1])
            i += 2
        elif args[i] == "--detail":
            detail = args[i + 1]
            i += 2
        else:
            sys.exit(__doc__)
    runs = []
    with open(f"{prefix}.windows") as f:
        for line in f:
            n, mode, bs, mtu, js = line.split(" ", 4)
            runs.append((int(n), mode, int(bs), int(mtu), json.loads(js)))
    cols = []
    for n, mode, bs, mtu, js in runs:
        label = mode + (f"-{bs}" if bs else "") + f"-mtu{mtu}"
        try:
            user, kern, per, blocks = window(prefix, n, [f"{prefix}.kallsyms"])
        except OSError as e:
            print(f"window {n} ({label}): no counts ({e})")
            continue
        units = js["bytes"] / 4096
        print(f"== {label}: {js['bytes']} bytes, {js['calls']} calls, {js.get('records', 0)} records")
        print(
            f"instructions per 4 KiB: {(user + kern) / units:.1f} in all (every thread): "
            f"user {user / units:.1f}, kernel {kern / units:.1f}"
        )
        for name, cnt in sorted(per.items(), key=lambda x: -x[1])[:top]:
            print(f"  {cnt / units:9.2f}  {100 * cnt / kern:5.1f}%  {name}")
        if detail:
            for name, bl in blocks.items():
                if name.split()[0] != detail:
                    continue
                print(f"  blocks of {name} (offset: instructions per 4 KiB):")
                for off, cnt in sorted(bl):
                    print(f"    +{off:#06x} {cnt / units:8.2f}")
        print()
        cols.append((label, units, user, per))
    if len(cols) < 2:
        return
    # Side by side: the functions that are in any mode's top.
    names = set()
    for _, units, _, per in cols:
        names.update(k for k, _ in sorted(per.items(), key=lambda x: -x[1])[:top])
    w = max(len(c[0]) for c in cols)
    w = max(w, 9)
    print("instructions per 4 KiB, every thread, side by side")
    print(f"{'':48} " + " ".join(f"{c[0]:>{w}}" for c in cols))
    print(f"{'(user space)':48} " + " ".join(f"{c[2] / c[1]:>{w}.1f}" for c in cols))
    print(f"{'(kernel)':48} " + " ".join(f"{sum(c[3].values()) / c[1]:>{w}.1f}" for c in cols))
    for name in sorted(names, key=lambda k: -max(c[3].get(k, 0) / c[1] for c in cols)):
        print(f"{name[:48]:48} " + " ".join(f"{c[3].get(name, 0) / c[1]:>{w}.2f}" for c in cols))


if __name__ == "__main__":
    main()
