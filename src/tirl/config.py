"""Configuration files: dataclasses read from YAML and ``key.sub=value`` overrides, written back as YAML.

Every entry point's options are one dataclass (``tirl.train.config.RLConfig``, ``tirl.train.sft_config.SFTConfig``,
``tirl.eval.config.EvalConfig``) whose sections are nested dataclasses; this module maps a YAML mapping onto it:
unknown keys are errors that list the known ones, values are converted to the field types (YAML 1.1 reads
``1e-6`` as a string; ``a,b`` is a list; ``null``/``none`` is None where the field allows it), and the
dataclasses' own validation runs. A file can extend another with a top-level ``base: other.yaml`` and state only
what differs (:func:`read_yaml_mapping`). A setting that moved to another key keeps working under its old one
for a while: a dataclass lists ``{old dotted key: new dotted key}`` in its ``MOVED_KEYS`` class attribute, and
:func:`build_dataclass` moves the value with a one-line warning naming the new key. It defines no settings itself.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

logger = logging.getLogger(__name__)


def check_choice(key: str, value: Any, choices: Sequence[str]) -> None:
    """Refuse a setting that is not one of ``choices`` (at least two), naming them.

    Raises:
        ValueError: ``{key} must be a, b or c, got 'x'``.
    """
    if value not in choices:
        raise ValueError(f"{key} must be {', '.join(choices[:-1])} or {choices[-1]}, got {value!r}")


def plain_dict(items: list[tuple[str, Any]]) -> dict[str, Any]:
    """``dataclasses.asdict`` factory that writes tuples as lists (``yaml.safe_dump`` refuses tuples)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in items}


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Convert ``value`` to type ``tp`` (a dataclass, list[...], X | None, bool/int/float/str)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null", "~")):
            if type(None) in typing.get_args(tp):
                return None
        errors = []
        for a in args:
            try:
                return _coerce(value, a, where)
            except (TypeError, ValueError) as exc:
                errors.append(str(exc))
        raise ValueError(f"{where}: cannot read {value!r} as {tp}: {'; '.join(errors)}")
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected a mapping, got {value!r}")
        return build_dataclass(tp, value, where)
    if origin is typing.Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ValueError(f"{where}: expected one of {', '.join(map(repr, allowed))}, got {value!r}")
        return value
    if origin is tuple:
        args = typing.get_args(tp)
        item_tp = args[0] if args else Any
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{where}: expected a list, got {value!r}")
        return tuple(_coerce(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is list:
        (item_tp,) = typing.get_args(tp) or (Any,)
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{where}: expected a list, got {value!r}")
        return [_coerce(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value)]
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "yes", "on", "1", "false", "no", "off", "0"):
            return value.lower() in ("true", "yes", "on", "1")
        raise ValueError(f"{where}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ValueError(f"{where}: expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        raise ValueError(f"{where}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, bool):
            raise ValueError(f"{where}: expected a number, got {value!r}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: expected a number, got {value!r}") from None
    if tp is str:
        if isinstance(value, (dict, list)):
            raise ValueError(f"{where}: expected a string, got {value!r}")
        return str(value)
    return value


def build_dataclass(cls: type, data: dict[str, Any], where: str = "") -> Any:
    """``cls(**data)`` with every value converted to its field's type, nested dataclasses built from mappings.

    Args:
        cls: a dataclass.
        data: a mapping of some of its field names (missing fields keep their defaults).
        where: the dotted path of ``data`` in the whole configuration, for messages.

    Raises:
        ValueError: an unknown key (the message suggests the closest known key, or the dataclass's
            ``KEY_HINTS`` entry for it, and lists the known ones), a value of the wrong type, or whatever the
            dataclass's own validation raises.
    """
    hints = _field_types(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    data = _move_keys(cls, data, where)
    unknown = sorted(set(data) - names)
    if unknown:
        key_hints: dict[str, str] = getattr(cls, "KEY_HINTS", {})
        prefix = where + "." if where else ""
        close = [
            key_hints.get(k) or "".join(prefix + m for m in difflib.get_close_matches(k, names, n=1)) for k in unknown
        ]
        close = [c for c in close if c]
        raise ValueError(
            f"unknown key(s) {', '.join(prefix + k for k in unknown)}"
            + (f" (did you mean {'; '.join(close)}?)" if close else "")
            + f"; known: {', '.join(sorted(names))}"
        )
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}" if where else k) for k, v in data.items()}
    return cls(**kwargs)


def _move_keys(cls: type, data: dict[str, Any], where: str) -> dict[str, Any]:
    """``data`` with the values under ``cls.MOVED_KEYS``' old keys moved to their new keys (input unchanged).

    An old key whose value is a mapping is left alone (``sandbox: {...}`` is the new section itself when the old
    key was a scalar of the same name). Each move logs one warning naming the new key.

    Raises:
        ValueError: the old and the new key are both given, with different values.
    """
    moved: dict[str, str] = getattr(cls, "MOVED_KEYS", {})
    for old, new in moved.items():
        *old_parents, old_leaf = old.split(".")
        node: Any = data
        for part in old_parents:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or old_leaf not in node or isinstance(node[old_leaf], dict):
            continue
        prefix = where + "." if where else ""
        value = node[old_leaf]
        *new_parents, new_leaf = new.split(".")
        target: Any = data
        for part in new_parents:
            target = target.get(part) if isinstance(target, dict) else None
        if isinstance(target, dict) and new_leaf in target and target[new_leaf] != value:
            raise ValueError(
                f"{prefix}{old} is {prefix}{new} now; both are given ({value!r}, {target[new_leaf]!r}): "
                f"keep {prefix}{new}"
            )
        data = merge(_without(data, old_parents, old_leaf), _nested(new_parents + [new_leaf], value))
        logger.warning("%s%s is deprecated: read as %s%s (write that instead)", prefix, old, prefix, new)
    return data


def _without(data: dict[str, Any], parents: list[str], leaf: str) -> dict[str, Any]:
    """``data`` without ``parents...leaf`` (copies along the path, so the input is unchanged)."""
    if not parents:
        return {k: v for k, v in data.items() if k != leaf}
    head, *rest = parents
    return {**data, head: _without(data[head], rest, leaf)}


def _nested(path: list[str], value: Any) -> dict[str, Any]:
    """``{"a": {"b": value}}`` for ``["a", "b"]``."""
    out: Any = value
    for part in reversed(path):
        out = {part: out}
    return out


def parse_overrides(overrides: Sequence[str]) -> dict[str, Any]:
    """``["a.b=1", "c=x,y"]`` -> nested ``{"a": {"b": 1}, "c": "x,y"}`` (values parsed as YAML scalars).

    Raises:
        ValueError: an item without ``=`` or with an empty key.
    """
    nested: dict[str, Any] = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            raise ValueError(f"override {item!r} is not of the form key.sub=value")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        node = nested
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(f"override {item!r} conflicts with an earlier override of {part!r}")
            node = child
        node[parts[-1]] = value
    return nested


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` applied: mappings are merged key by key, anything else replaced (inputs unchanged)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


BASE_KEY = "base"
"""Top-level key of a configuration file naming the file it extends (a path relative to the file's folder)."""


def read_yaml_mapping(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The top-level mapping of a YAML file (an empty file is an empty mapping), with its ``base`` resolved.

    A file may start from another one: ``base: stage1.yaml`` (a path relative to the file's own folder) reads
    that file first (itself possibly with a ``base``) and applies this file's keys over it with :func:`merge`:
    mappings (sections) are merged key by key, any other value (a list included) replaces the base's. So a
    recipe states only what differs from the one it extends. The ``base`` key itself is not part of the result.

    Raises:
        FileNotFoundError: ``path`` (or a base) does not exist.
        ValueError: invalid YAML, a top level that is not a mapping, a ``base`` that is not a string, or a
            cycle of bases.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no config file at {path}")
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: invalid YAML: {exc}") from exc
    if loaded is not None and not isinstance(loaded, dict):
        raise ValueError(f"{path}: the top level must be a mapping")
    data = dict(loaded or {})
    if BASE_KEY not in data:
        return data
    base = data.pop(BASE_KEY)
    if not isinstance(base, str) or not base.strip():
        raise ValueError(f"{path}: '{BASE_KEY}' must be the path of another config file, got {base!r}")
    base_path = (path.parent / base).resolve()
    seen = (*_seen, path.resolve())
    if base_path in seen:
        raise ValueError(f"{path}: '{BASE_KEY}: {base}' makes a cycle ({' -> '.join(map(str, (*seen, base_path)))})")
    return merge(read_yaml_mapping(base_path, seen), data)


def load_dataclass_config(cls: type, path: str | Path | None = None, overrides: Sequence[str] = ()) -> Any:
    """Read a configuration dataclass ``cls`` (``tirl.train.config.RLConfig``, ``tirl.train.sft_config.SFTConfig``)
    from a YAML file (or the defaults when ``path`` is None) plus ``key.sub=value`` overrides applied in order.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: invalid YAML, a malformed override, an unknown key (the message lists the known ones), or a
            value of the wrong type.
    """
    data = read_yaml_mapping(path) if path is not None else {}
    return build_dataclass(cls, merge(data, parse_overrides(overrides)))


def dump_config(config: Any, path: str | Path) -> None:
    """Write ``config`` (a dataclass with ``to_dict``) as YAML; :func:`load_dataclass_config` reads it back."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(yaml.safe_dump(config.to_dict(), sort_keys=False), encoding="utf-8")


def section_types(cls: type) -> dict[str, type]:
    """The sections of configuration dataclass ``cls``: ``{field name: dataclass type}`` of its fields whose
    type is a dataclass (``X | None`` included), in field order."""
    hints = typing.get_type_hints(cls)
    out: dict[str, type] = {}
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if typing.get_origin(tp) in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            tp = args[0] if len(args) == 1 else tp
        if dataclasses.is_dataclass(tp):
            out[f.name] = tp  # type: ignore[assignment]
    return out


__all__ = [
    "section_types",
    "BASE_KEY",
    "build_dataclass",
    "check_choice",
    "dump_config",
    "load_dataclass_config",
    "merge",
    "parse_overrides",
    "plain_dict",
    "read_yaml_mapping",
]
