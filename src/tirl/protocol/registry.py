"""A registry of named extensions whose built-ins are imported on first use.

One class behind the two seams of :mod:`tirl.protocol` that a ``ProtocolConfig`` field chooses by name: the tools
(:mod:`tirl.protocol.tools`, ``protocol.tool``) and the tool-call formats (:mod:`tirl.protocol.formats`,
``protocol.tool_call_format``). Each built-in lives in a module of its own that registers it at import; the
registry knows only the module's name, so naming a built-in imports just that module, and a user's extension
registers itself before a config names it.

Sandbox workers import :mod:`tirl.protocol`, so this module imports nothing but the standard library.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Generic, Protocol, TypeVar


class Named(Protocol):
    """What a registry holds: anything with a ``name``."""

    name: str


T = TypeVar("T", bound=Named)


class Registry(Generic[T]):
    """Named extensions of one kind: the built-ins (imported on first use) and whatever was registered since.

    Args:
        kind: what an entry is, for messages ("tool", "tool-call format").
        setting: the ``ProtocolConfig`` field that names an entry, for the unknown-name message ("tool",
            "tool_call_format").
        builtins: registry name -> module that registers that entry when imported.
    """

    def __init__(self, kind: str, setting: str, builtins: Mapping[str, str]) -> None:
        self.kind = kind
        self.setting = setting
        self.builtins: dict[str, str] = dict(builtins)
        self._entries: dict[str, T] = {}

    def register(self, entry: T, *, replace: bool = False) -> T:
        """Add ``entry`` under ``entry.name`` and return it (registering the same object again is a no-op).

        Raises:
            ValueError: an empty name, or a name already taken by another object (unless ``replace``).
        """
        if not entry.name:
            raise ValueError(f"a {self.kind} needs a non-empty name")
        if entry.name in self._entries and not replace and self._entries[entry.name] is not entry:
            raise ValueError(f"{self.kind} {entry.name!r} is already registered; pass replace=True to replace it")
        self._entries[entry.name] = entry
        return entry

    def unregister(self, name: str) -> T | None:
        """Remove the entry called ``name`` and return it (None when there was none). A built-in removed this
        way is registered again by its module only in a fresh interpreter, so this is for tests and for
        extensions a user registered."""
        return self._entries.pop(name, None)

    def names(self) -> tuple[str, ...]:
        """The names a config may use: the built-ins first, then any registered since, each once."""
        return tuple(dict.fromkeys([*self.builtins, *self._entries]))

    def get(self, name: str) -> T:
        """The entry called ``name`` (a built-in's module is imported on first use).

        Raises:
            ValueError: no such entry (the message names the setting and lists the known names).
        """
        entry = self._entries.get(name) if isinstance(name, str) else None
        if entry is not None:
            return entry
        module = self.builtins.get(name) if isinstance(name, str) else None
        if module is not None:
            importlib.import_module(module)
            entry = self._entries.get(name)
            if entry is not None:
                return entry
        raise ValueError(f"{self.setting} must be one of {', '.join(self.names())}, got {name!r}")


__all__ = ["Registry"]
