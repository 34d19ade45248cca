#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Writes a C probe that prints every name a zcrx_rs uAPI header gives:
each struct's size, each member's offset and size (members of anonymous
unions and structs included), each object-like ZCRX_RS_ macro's value.
Built against an old header and against the current one, the two outputs
show any name that went away, moved or changed (scripts/uapi-compat.sh).

usage: probe.py HEADER > probe.c
"""
import re
import sys


def members(body):
    """Member names of a struct body, descending into anonymous unions and
    structs; preprocessor lines are dropped (the probe is compiled with the
    header's default view, no -D)."""
    body = re.sub(r'/\*.*?\*/', '', body, flags=re.S)
    body = '\n'.join(l for l in body.split('\n') if not l.strip().startswith('#'))
    names = []
    for decl in re.split(r'[;{}]', body):
        decl = decl.strip()
        m = re.search(r'([A-Za-z_]\w*)\s*(\[[^\]]*\])?\s*$', decl)
        if not decl or not m or re.fullmatch(r'(__extension__\s+)?(union|struct)', decl):
            continue
        if len(decl.split()) < 2:
            continue
        names.append(m.group(1))
    return names


def main():
    text = open(sys.argv[1]).read()
    out = ['#include <stddef.h>', '#include <stdio.h>', '#include <linux/zcrx_rs.h>', '',
           '#define S(t)\tprintf("sizeof %s %zu\\n", #t, sizeof(struct t))',
           '#define F(t, f)\tprintf("field %s.%s %zu %zu\\n", #t, #f, offsetof(struct t, f), '
           'sizeof(((struct t *)0)->f))',
           '#define V(m)\tprintf("value %s %llu\\n", #m, (unsigned long long)(m))', '',
           'int main(void)', '{']
    for m in re.finditer(r'^#define\s+(ZCRX_RS_\w+)\s+\S', text, flags=re.M):
        out.append('\tV(%s);' % m.group(1))
    for m in re.finditer(r'^struct\s+(zcrx_rs_\w+)\s*\{', text, flags=re.M):
        depth, i = 1, m.end()
        while depth:
            depth += {'{': 1, '}': -1}.get(text[i], 0)
            i += 1
        out.append('\tS(%s);' % m.group(1))
        for f in members(text[m.end():i - 1]):
            out.append('\tF(%s, %s);' % (m.group(1), f))
    out += ['\treturn 0;', '}']
    print('\n'.join(out))


main()
