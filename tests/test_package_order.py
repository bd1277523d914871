"""The package order that docs/architecture.md states ("Dependencies point one way"), checked on every import.

Every ``import`` and ``from ... import`` of ``src/tirl`` counts: at module level, inside functions and
classes, under ``if TYPE_CHECKING:``, absolute and relative, and the module names of the lazy export tables
(dicts of ``"tirl.x.y"`` strings) in package ``__init__``s. Not counted: module names that are run, not
imported (``python -m tirl.cli.main`` in ``tirl.service.process``), and the names the sandbox is given (preload
modules, readable packages). A package is the first name under ``tirl`` (``tirl.protocol.formats.hermes`` is in
``protocol``); the leaves (``tirl`` itself, ``tirl._lazy``, ``tirl._loop``) may be imported by every package
and import nothing of tirl's.

:data:`ORDER` is the explicit table; one test checks that the docs' table says exactly the same, so the docs
and the rule cannot drift apart. Adding a package means adding a row to both.
"""

from __future__ import annotations

import ast
import graphlib
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "tirl"
DOC = REPO / "docs" / "architecture.md"

LEAVES = frozenset({"tirl", "tirl._lazy", "tirl._loop"})
"""Modules every package may import; they import nothing of tirl's."""

_LOWER = frozenset(
    {"algo", "config", "data", "models", "protocol", "reward", "rollout", "runs", "runtime", "sandbox", "service"}
)
ORDER: dict[str, frozenset[str]] = {
    "sandbox": frozenset(),
    "protocol": frozenset({"sandbox"}),
    "service": frozenset({"sandbox"}),
    "reward": frozenset({"protocol", "sandbox", "service"}),
    "models": frozenset(),
    "config": frozenset(),
    "runs": frozenset(),
    "algo": frozenset({"protocol"}),
    "rollout": frozenset({"protocol", "sandbox", "models"}),
    "data": frozenset({"protocol", "reward", "runs", "sandbox"}),
    "runtime": frozenset({"protocol", "sandbox", "service", "reward", "rollout", "models"}),
    "sim": frozenset({"rollout"}),
    "view": frozenset({"protocol", "runs"}),
    "analysis": frozenset({"algo", "data", "protocol", "runs", "view"}),
    "train": (_LOWER - {"train"}) | {"analysis"},
    "eval": _LOWER - {"eval"},
}
ORDER["cli"] = frozenset(ORDER)  # every package; no package imports cli
"""Package -> the packages it may import from (docs/architecture.md, the table under "Dependencies point one way")."""

ONLY_FROM: dict[tuple[str, str], frozenset[str]] = {("reward", "service"): frozenset({"tirl.reward.routes"})}
"""(package, imported package) -> the only modules of the package that may import it."""


@dataclass(frozen=True)
class Edge:
    """One import: module ``source`` (line ``line``) imports module ``target``."""

    source: str
    target: str
    line: int


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str, root: Path) -> bool:
    """Whether ``tirl.a.b`` names a module or package of the tree at ``root`` (not a name defined in one)."""
    if not name.startswith("tirl."):
        return False
    rel = Path(*name.split(".")[1:])
    return (root / rel).with_suffix(".py").is_file() or (root / rel / "__init__.py").is_file()


def import_edges(root: Path = SRC) -> list[Edge]:
    """Every tirl-internal import of the package tree at ``root`` (the ``tirl`` folder), see the module docstring."""
    edges = []
    for path in sorted(root.rglob("*.py")):
        module = _module_name(path, root)
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.split(".") if is_package else module.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    parent = ".".join(base + ([node.module] if node.module else []))
                else:
                    parent = node.module or ""
                # ``from tirl import train`` imports the package tirl.train; ``from tirl import __version__`` tirl
                targets = [
                    f"{parent}.{a.name}" if _is_module(f"{parent}.{a.name}", root) else parent for a in node.names
                ]
            elif isinstance(node, ast.Dict) and is_package:
                values = [v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
                if values and len(values) == len(node.values) and all(v.startswith("tirl.") for v in values):
                    targets = values  # a lazy export table: name -> the module imported on first access
            edges += [
                Edge(module, t, node.lineno)
                for t in dict.fromkeys(targets)  # one edge per imported module
                if t == "tirl" or t.startswith("tirl.")
            ]
    return edges


def package_of(module: str) -> str | None:
    """The package of a tirl module (None for a leaf)."""
    if module in LEAVES or any(module.startswith(leaf + ".") for leaf in LEAVES - {"tirl"}):
        return None
    return module.split(".")[1]


def violations(
    edges: list[Edge],
    order: dict[str, frozenset[str]] = ORDER,
    only_from: dict[tuple[str, str], frozenset[str]] = ONLY_FROM,
) -> list[str]:
    """One line per import that the order does not allow."""
    found = []
    for e in edges:
        src, dst = package_of(e.source), package_of(e.target)
        where = f"{e.source}:{e.line} imports {e.target}"
        if src is None:
            found.append(f"{where}: a leaf imports nothing of tirl's")
        elif dst is None or src == dst:
            continue
        elif src not in order or dst not in order:
            missing = src if src not in order else dst
            found.append(f"{where}: package {missing!r} is not in the order (docs/architecture.md)")
        elif dst not in order[src]:
            found.append(f"{where}: {src} -> {dst} points up (docs/architecture.md, 'Dependencies point one way')")
        elif (src, dst) in only_from and e.source not in only_from[(src, dst)]:
            found.append(f"{where}: only {sorted(only_from[(src, dst)])} of {src} may import {dst}")
    return found


def doc_order(text: str) -> tuple[dict[str, frozenset[str]], dict[tuple[str, str], frozenset[str]]]:
    """The order table of docs/architecture.md's "Dependencies point one way" paragraph."""
    section = text[text.index("Dependencies point one way") :]
    lines = section[section.index("| package | imports from |") :].splitlines()
    order: dict[str, frozenset[str]] = {}
    only: dict[tuple[str, str], frozenset[str]] = {}
    every = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        first, allowed = (cell.strip() for cell in line.strip().strip("|").split("|"))
        for pkg in re.findall(r"`([a-z_]+)`", first):
            if allowed.startswith("every package"):
                every.append(pkg)
                continue
            order[pkg] = frozenset()
            for dep, restriction in re.findall(r"`([a-z_]+)`(?:\s*\(only ([^)]*)\))?", allowed):
                order[pkg] |= {dep}
                if restriction:
                    only[(pkg, dep)] = frozenset("tirl." + m for m in re.findall(r"`([a-z_.]+)`", restriction))
    for pkg in every:
        order[pkg] = frozenset(order)
    return order, only


def test_docs_state_exactly_this_order():
    order, only = doc_order(DOC.read_text(encoding="utf-8"))
    assert order == ORDER
    assert only == ONLY_FROM


def test_the_order_is_an_order_and_covers_every_package():
    graphlib.TopologicalSorter({p: set(deps) - {p} for p, deps in ORDER.items()}).prepare()  # CycleError if not
    assert all(p not in deps for p, deps in ORDER.items())
    packages = {package_of(_module_name(path, SRC)) for path in SRC.rglob("*.py")} - {None}
    assert packages == set(ORDER)  # a new package needs its row; a row without a package is stale


def test_every_import_of_tirl_points_down():
    edges = import_edges()
    assert violations(edges) == []
    assert len(edges) > 300  # the scan sees the imports (module-level, in functions, under TYPE_CHECKING)
    seen = {(e.source, e.target) for e in edges}
    assert ("tirl.sandbox.pool", "tirl._loop") in seen  # inside SyncSandbox.__init__
    assert ("tirl.runtime", "tirl.rollout.hf_engine") in seen  # under TYPE_CHECKING and in a builder


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "tirl"
    for name, text in {"__init__.py": "", "_loop.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        for parent in path.parents:  # every folder is a package
            if parent == root.parent:
                break
            (parent / "__init__.py").touch()
    return root


def test_a_synthetic_upward_import_is_caught_in_every_form(tmp_path):
    root = _tree(
        tmp_path,
        {
            "sandbox/pool.py": (
                "from typing import TYPE_CHECKING\n"
                "import tirl\n"
                "from tirl import __version__\n"
                "from tirl._loop import BackgroundLoop\n"  # leaves: allowed
                "from tirl.sandbox import types\n"  # its own package: allowed
                "if TYPE_CHECKING:\n"
                "    from tirl.runtime import AgentRuntime\n"  # line 7
                "def f():\n"
                "    from tirl.train.common import x\n"  # line 9
                "from ..reward import verify\n"  # line 10, relative
                "from tirl import eval\n"  # line 11, a package named through tirl
                "class C:\n"
                "    import tirl.cli.main\n"  # line 13
            ),
            "sandbox/types.py": "",
            "runtime.py": "from tirl.sandbox import pool\n",  # allowed
            "train/common.py": "",
            "train/__init__.py": "_E = {'a': 'tirl.train.common', 'b': 'tirl.cli.main'}\n",  # lazy table, line 1
            "reward/__init__.py": "",
            "reward/verifier.py": "from tirl.service import app\n",  # allowed edge, not from this module
            "reward/routes.py": "from tirl.service import app\n",
            "service/app.py": "",
            "eval/__init__.py": "",
            "cli/main.py": "from tirl.train import common\n",
            "_lazy.py": "from tirl.sandbox import types\n",  # a leaf importing tirl
            "tools/x.py": "from tirl.sandbox import types\n",  # a package missing from the order
        },
    )
    found = violations(import_edges(root))
    heads = sorted(v.split(":")[0] + ":" + v.split(":")[1].split(" ")[0] for v in found)
    assert heads == sorted(
        [
            "tirl.sandbox.pool:7",
            "tirl.sandbox.pool:9",
            "tirl.sandbox.pool:10",
            "tirl.sandbox.pool:11",
            "tirl.sandbox.pool:13",
            "tirl.train:1",
            "tirl.reward.verifier:1",
            "tirl._lazy:1",
            "tirl.tools.x:1",
        ]
    ), found
    assert any("sandbox -> runtime points up" in v for v in found)
    assert any("only ['tirl.reward.routes'] of reward may import service" in v for v in found)
    assert any("'tools' is not in the order" in v for v in found)
    assert any("a leaf imports nothing" in v for v in found)


def test_a_docs_row_that_differs_from_the_table_is_seen():
    text = DOC.read_text(encoding="utf-8")
    assert "| `sandbox` | nothing |" in text
    changed, _ = doc_order(text.replace("| `sandbox` | nothing |", "| `sandbox` | `protocol` |"))
    assert changed["sandbox"] == {"protocol"} and changed != ORDER
    _, only = doc_order(text.replace(" (only `reward.routes`: the optional HTTP routes)", ""))
    assert only == {}
