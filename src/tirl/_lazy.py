"""Lazy package exports: a package's ``__getattr__`` that imports an entry point's module on first access (PEP 562),
so importing ``tirl.eval``, ``tirl.rollout``, ``tirl.train`` or ``tirl.service`` imports no torch or FastAPI."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """The module-level ``__getattr__`` of ``package``: ``exports`` maps a public name to its defining module.

    Raises (from the returned function):
        AttributeError: a name that is not in ``exports``.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
