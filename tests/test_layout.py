"""The house rules of ``src/fedep``: floors that point one way, modules of a readable size,
and the Flower apps, the CLI and the model files using the estimators' public API only."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "fedep"


def _graph_tool():
    spec = importlib.util.spec_from_file_location(
        "import_graph", ROOT / "tools" / "import_graph.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("import_graph", mod)
    spec.loader.exec_module(mod)
    return mod


def _summary(tool) -> dict:
    known = {tool.module_name(f) for f in tool.ROOT.rglob("*.py")}
    imps = tool.imports(known)
    edges = {(a, b) for a, b, _, _ in imps}
    upward = {
        (tool.unit(a), tool.unit(b))
        for a, b, _, _ in imps
        if tool.unit(a) != "fedep"
        and tool.unit(b) != "fedep"
        and tool.FLOORS.get(tool.unit(a), 99) < tool.FLOORS.get(tool.unit(b), 99)
    }
    return {"circles": tool.circles(edges), "upward": upward, "known": known}


def test_the_import_graph_has_no_circles_and_no_upward_arrow():
    tool = _graph_tool()
    s = _summary(tool)
    assert s["circles"] == []
    assert s["upward"] == set()


def test_every_unit_has_a_floor():
    tool = _graph_tool()
    units = {tool.unit(m) for m in _summary(tool)["known"]} - {"fedep", "__main__"}
    assert units <= set(tool.FLOORS), units - set(tool.FLOORS)


def test_the_graph_tool_finds_a_planted_circle(tmp_path):
    tool = _graph_tool()
    assert tool.circles({("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")}) == [["a", "b", "c"]]
    assert tool.circles({("a", "b"), ("b", "c")}) == []


@pytest.mark.parametrize("path", sorted(SRC.rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_no_source_file_is_over_800_lines(path):
    assert len(path.read_text().splitlines()) <= 800


def _private_members() -> set[str]:
    """Names starting with one ``_`` that the detector classes define (methods and class
    attributes), excluding dunders and scikit-learn's own."""
    from sklearn.base import BaseEstimator

    from fedep.detectors import DETECTORS

    ours: set[str] = set()
    for cls in DETECTORS.values():
        for klass in inspect.getmro(cls):
            if klass.__module__.startswith("fedep."):
                ours |= {n for n in vars(klass) if n.startswith("_") and not n.startswith("__")}
    return ours - set(dir(BaseEstimator))


def test_the_top_floor_calls_no_private_estimator_member():
    private = _private_members()
    assert {"_fit_kept", "_trimmed_fit", "_warm_start"} <= private  # the check sees them
    used = []
    for sub in ("flower", "cli", "modelfile"):
        for path in sorted((SRC / sub).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Attribute) and node.attr in private:
                    used.append(f"{path.relative_to(SRC)}:{node.lineno} .{node.attr}")
    assert used == []
