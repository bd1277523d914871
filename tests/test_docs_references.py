"""Docs that cannot drift (issue 44): every dotted ``tirl.`` name and every repository path that README.md and
docs/*.md write in code spans or links exists.

A name is resolved by importing its longest module prefix and reading the rest as attributes (a class's
method, a dataclass field with a default, a module constant); a path is checked against the checkout (a glob
must match something; ``FILE::name`` must name a ``def``/``class`` in FILE). It would have caught
``tirl.protocol.tools._BUILTIN_MODULES`` after the registry replaced it.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "experiments").glob("*/README.md")),  # the experiments' write-ups
]

_CODE = re.compile(r"`([^`\n]+)`")
_NAME = re.compile(r"\btirl(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
_PLACEHOLDERS = {"KEY", "VALUE", "NAME", "FIELD"}  # `protocol.KEY=VALUE`: a pattern, not a name
# a path written as a pattern (`runs/X/checkpoint-N`, `configs/rl/FILE.yaml`), not a file of the repository
_PATTERN_PATH = re.compile(r"[<>{}$]|\.\.\.|NNN|_N\b|-N\b|\b(?:FILE|DIR|NAME|PATH)\b")
_PATH_ROOTS = ("src/", "tests/", "configs/", "docs/", "benchmarks/", "experiments/", "constraints/", ".ci/")


def _resolve(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if hasattr(obj, attr):
                obj = getattr(obj, attr)
            elif dataclasses.is_dataclass(obj) and attr in {f.name for f in dataclasses.fields(obj)}:
                return True  # a field without a class-level default: documented, real
            else:
                return False
        return True
    return False


_SHORT = re.compile(r"(?<![\w./-])([a-z_][a-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


def _modules() -> dict[str, list[str]]:
    """Each tirl module's last name (``tools``, ``rollout_func``) -> the full names that end with it."""
    import pkgutil

    import tirl

    out: dict[str, list[str]] = {}
    for info in pkgutil.walk_packages(tirl.__path__, "tirl."):
        out.setdefault(info.name.rsplit(".", 1)[-1], []).append(info.name)
    return out


def _names() -> list[tuple[str, str]]:
    """``tirl.x.y`` names, and short ones such as ``tools._BUILTIN_MODULES`` or ``decontam.DEFAULT_BENCHMARKS``
    (a tirl module's last name, then a constant, a private or a class name: recipe keys such as
    ``rollout.max_turns`` are lower case and left alone), each as ``doc, name`` (short ones as ``a.b|tirl.x.a``
    alternatives joined by ``|``)."""
    modules = _modules()
    found: set[tuple[str, str]] = set()
    for doc in DOCS:
        for span in _CODE.findall(doc.read_text(encoding="utf-8")):
            for name in _NAME.findall(span):
                if name.split(".")[-1] not in _PLACEHOLDERS:
                    found.add((str(doc.relative_to(ROOT)), name.rstrip(".")))
            for short in _SHORT.findall(span):
                head, last = short.split(".")[0], short.split(".")[-1]
                if last in _PLACEHOLDERS or head not in modules or head == "tirl":
                    continue
                if last.startswith("_") or last[:1].isupper():
                    rest = short.split(".", 1)[1]
                    found.add((str(doc.relative_to(ROOT)), "|".join(f"{m}.{rest}" for m in modules[head])))
    return sorted(found)


def _paths() -> list[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for span in _CODE.findall(text):
            for token in span.split():
                token = token.strip("(),;:'\"")
                if token.startswith(_PATH_ROOTS) and not _PATTERN_PATH.search(token):
                    found.add((str(doc.relative_to(ROOT)), token))
        for link in _LINK.findall(text):
            if not re.match(r"[a-z]+:", link):  # not a URL
                rel = (doc.parent / link).resolve()
                try:
                    found.add((str(doc.relative_to(ROOT)), str(rel.relative_to(ROOT))))
                except ValueError:
                    found.add((str(doc.relative_to(ROOT)), link))  # a link outside the checkout: reported as missing
    return sorted(found)


def _path_exists(token: str) -> bool:
    path, _, member = token.partition("::")
    path = path.rstrip("/")
    if any(c in path for c in "*?["):
        return any(ROOT.glob(path))
    target = ROOT / path
    if not target.exists():
        return False
    if member:
        name = member.split("::")[-1].split("[")[0]
        return re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b", target.read_text(), re.M) is not None
    return True


def test_the_docs_name_some_things_at_all():
    # the scans must find what they are meant to (else the tests below pass on nothing)
    assert len(_names()) > 100 and len(_paths()) > 50


@pytest.mark.parametrize("doc,name", _names())
def test_every_dotted_tirl_name_in_the_docs_exists(doc, name):
    assert any(_resolve(n) for n in name.split("|")), f"{doc} names `{name}`, which does not exist"


@pytest.mark.parametrize("doc,path", _paths())
def test_every_repository_path_in_the_docs_exists(doc, path):
    assert _path_exists(path), f"{doc} names `{path}`, which is not in the repository"
