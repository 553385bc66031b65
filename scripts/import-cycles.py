#!/usr/bin/env python3
"""Fails if modules of a crate import each other in a circle.

Usage: scripts/import-cycles.py src server/src

Each top-level module (a file or a folder under the crate root) is a node;
`crate::x` and `super::x` paths outside comments and test modules are its
edges. Prints every strongly connected component of two or more modules.
"""
import os
import re
import sys


def module_edges(root):
    files = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            if not name.endswith(".rs") or name == "tests.rs" or name.endswith("_tests.rs"):
                continue
            path = os.path.join(dirpath, name)
            parts = os.path.relpath(path, root)[:-3].split(os.sep)
            if parts[-1] in ("mod", "lib", "main"):
                parts = parts[:-1]
            files["::".join(parts)] = path
    tops = {m.split("::")[0] for m in files if m}
    edges = {t: set() for t in tops}
    for module, path in files.items():
        if not module:
            continue
        top = module.split("::")[0]
        src = open(path, encoding="utf-8").read()
        src = re.split(r"#\[cfg\([^\]]*test[^\]]*\)\]\s*mod [a-z_]*tests", src)[0]
        src = re.sub(r"//[^\n]*", "", src)
        deps = set(re.findall(r"crate::([a-z_][a-z0-9_]*)", src))
        if "::" not in module:
            deps |= set(re.findall(r"super::([a-z_][a-z0-9_]*)", src))
        edges[top] |= {d for d in deps if d in tops and d != top}
    return edges


def circles(edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


failed = False
for root in sys.argv[1:]:
    found = circles(module_edges(root))
    for group in found:
        print(f"{root}: modules import each other in a circle: {' -> '.join(group)}")
    failed |= bool(found)
    if not found:
        print(f"{root}: no import circle")
sys.exit(1 if failed else 0)
