"""The import graph of ``src/fedep``: every import, those inside functions too.

Usage::

    python tools/import_graph.py            # summary: floors, upward arrows, circles
    python tools/import_graph.py --json     # the same as JSON
    python tools/import_graph.py --edges    # every arrow, module -> module

Nodes are the units of the layering: each subpackage of ``fedep`` (``core``, ``data``,
``features``, ...) and each top-level module (``params``, ``_atomic``, ...); ``fedep``
itself (its ``__init__``) is left out, as a package's façade. Floors are declared in
:data:`FLOORS` (lower number = lower floor). An arrow from a unit to a unit on a higher
floor is *upward*; circles are strongly connected groups of modules (module level,
``a.b.c`` -> ``a.b.d``), found with Tarjan's algorithm.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src" / "fedep"

#: The floors of the house, bottom first. A unit may import its own floor and below.
FLOORS: dict[str, int] = {
    "_names": 0,
    "_json": 0,
    "_atomic": 0,
    "errors": 0,
    "_errors": 0,
    "_progress": 0,
    "_procs": 0,
    "core": 1,
    "data": 2,
    "features": 2,
    "federation": 3,
    "params": 4,
    "detectors": 4,
    "modelfile": 5,
    "evaluation": 6,
    "alerts": 6,
    "live": 6,
    "flower": 7,
    "cli": 7,
}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def resolve(mod: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(known: set[str]) -> list[tuple[str, str, int, bool]]:
    """(importer, imported, line, inside_function) for every fedep import."""
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        mod = module_name(path)
        tree = ast.parse(path.read_text(), str(path))
        is_pkg = path.name == "__init__.py"
        funcs: set[int] = set()
        for n in ast.walk(tree):
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
                for m in ast.walk(n):
                    if m is not n:
                        funcs.add(id(m))
        for n in ast.walk(tree):
            targets = []
            if isinstance(n, ast.Import):
                targets = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom):
                base = resolve(mod, is_pkg, n)
                for a in n.names:
                    full = f"{base}.{a.name}"
                    targets.append(full if full in known else base)
            for t in targets:
                if t == "fedep" or t.startswith("fedep."):
                    # the longest known module the name starts with
                    while t not in known and "." in t:
                        t = t.rsplit(".", 1)[0]
                    if t != mod:
                        out.append((mod, t, n.lineno, id(n) in funcs))
    return out


def unit(mod: str) -> str:
    """The layering unit of a module: ``fedep.<unit>`` (``fedep.flower`` is a
    unit of its own while the Flower apps live there)."""
    if mod.startswith("fedep.flower"):
        return "flower"
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def circles(edges: set[tuple[str, str]]) -> list[list[str]]:
    graph: dict[str, list[str]] = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--edges", action="store_true", help="print every arrow")
    args = p.parse_args(argv)
    known = {module_name(f) for f in ROOT.rglob("*.py")}
    imps = imports(known)
    # package __init__ re-exports make every submodule look like it imports its package:
    # an import of a package counts as an import of that package's __init__ module.
    mod_edges = {(a, b) for a, b, _, _ in imps}
    unit_edges: dict[tuple[str, str], int] = {}
    for a, b, _, _ in imps:
        ua, ub = unit(a), unit(b)
        if ua != ub and ua != "fedep" and ub != "fedep":
            unit_edges[(ua, ub)] = unit_edges.get((ua, ub), 0) + 1
    unknown = sorted({u for e in unit_edges for u in e if u not in FLOORS})
    upward = [
        {"from": a, "to": b, "imports": n}
        for (a, b), n in sorted(unit_edges.items())
        if FLOORS.get(a, 99) < FLOORS.get(b, 99)
    ]
    upward_detail = [
        f"{a}:{line} -> {b}{' (in a function)' if f else ''}"
        for a, b, line, f in imps
        if unit(a) != "fedep"
        and unit(b) != "fedep"
        and FLOORS.get(unit(a), 99) < FLOORS.get(unit(b), 99)
    ]
    cyc = circles(mod_edges)
    summary = {
        "modules": len(known),
        "imports": len(imps),
        "imports_in_functions": sum(1 for *_, f in imps if f),
        "unit_arrows": len(unit_edges),
        "upward_arrows": upward,
        "upward_imports": upward_detail,
        "circles": cyc,
        "units_without_floor": unknown,
    }
    if args.edges:
        for a, b, line, f in imps:
            print(f"{a}:{line} -> {b}{'  [function]' if f else ''}")
        return 0
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(
        f"{summary['modules']} modules, {summary['imports']} imports "
        f"({summary['imports_in_functions']} inside functions), "
        f"{summary['unit_arrows']} arrows between units"
    )
    for u in sorted(FLOORS, key=lambda u: (FLOORS[u], u)):
        print(f"  floor {FLOORS[u]}: {u}")
    print(f"upward arrows: {len(upward)}")
    for line in upward_detail:
        print(f"  {line}")
    print(f"circles between modules: {len(cyc)}")
    for c in cyc:
        print("  " + " <-> ".join(c))
    if unknown:
        print(f"units without a floor: {', '.join(unknown)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
