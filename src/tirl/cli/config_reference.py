"""The reference of every setting: each key of an RL recipe, an SFT recipe and an evaluation file, generated from
the configuration dataclasses' docstrings.

One setting is described in one place, the ``Attributes:`` entry of its dataclass (read by
:func:`tirl.cli.config_flags.attribute_docs`, as ``tirl eval``'s flags are); this module turns those entries into

* ``docs/config.md`` (:func:`markdown`): for :class:`tirl.train.config.RLConfig`,
  :class:`tirl.train.sft_config.SFTConfig` and :class:`tirl.eval.config.EvalConfig`, one table per section with
  each key's dotted name, type, default, meaning and, for ``tirl eval``, its flag. Regenerate it with::

      python -m tirl.cli.config_reference > docs/config.md

  ``tests/test_config_reference.py`` fails when a field has no description or the file is stale.
* the key panels of ``tirl train rl --help`` and ``tirl train sft --help`` (:func:`keys_help_command`): every key
  by section with its default and the first sentence of its description, as ``tirl eval --help`` lists its flags.

Importing this module loads no engine and no model.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typer.core import TyperCommand

from tirl.cli.config_flags import _first_sentence, attribute_docs
from tirl.config import section_types


@dataclass(frozen=True)
class Setting:
    """One key of a configuration.

    Attributes:
        key: the dotted key (``rollout.group_size``), as in a file, ``key=value`` and ``--print-config``.
        type: the field's type, written as in Python (``int | None``, ``list[str]``, ``'paper' | 'topk'``).
        default: the default, written as in YAML (``16``, ``null``, ``[math, aime]``); ``required`` when none.
        help: the description (the field's docstring entry, cleaned of markup); empty when it has none.
        flag: the command-line flag that sets it (``tirl eval`` only), or None.
    """

    key: str
    type: str
    default: str
    help: str
    flag: str | None = None


@dataclass(frozen=True)
class Section:
    """The settings of one section (``""``: the top level), in field order.

    Attributes:
        name: the section's dotted key (``rollout``, ``model.lora``; ``""`` for the top level).
        about: what the section is (its entry in the parent's docstring, else its class's first paragraph).
        settings: its keys (not those of its own sections, which are sections of their own).
    """

    name: str
    about: str
    settings: tuple[Setting, ...]


def type_name(tp: Any) -> str:
    """``tp`` written as in Python, short: ``int | None``, ``list[str]``, ``'a' | 'b'``, ``bool | 'auto'``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(tp))
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (list, tuple, dict):
        args = [type_name(a) if a is not Ellipsis else "..." for a in typing.get_args(tp)]
        return f"{origin.__name__}[{', '.join(args)}]" if args else origin.__name__
    if tp is type(None):
        return "None"
    return getattr(tp, "__name__", str(tp))


def _default_text(f: dataclasses.Field, parent_default: Any = None) -> str:
    if parent_default is not None:  # RL's sandbox: ExecutorConfig's fields with the recipe's own defaults
        value = getattr(parent_default, f.name)
    elif f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, tuple):
        value = list(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _class_about(cls: type, markdown: bool) -> str:
    from tirl.cli.config_flags import _clean, _markdown

    doc = (cls.__doc__ or "").strip().split("\n\n")[0]
    return (_markdown if markdown else _clean)(doc)


def sections(cls: type, flags: Mapping[str, str] | None = None, *, markdown: bool = False) -> list[Section]:
    """The sections of configuration dataclass ``cls``, the top level first, each followed by its own sections
    (``model``, then ``model.lora``), with every key.

    Args:
        cls: the configuration (``RLConfig``, ``SFTConfig``, ``EvalConfig``).
        flags: ``{dotted key: flag}`` of the command that sets them (``tirl eval``'s generated flags).
        markdown: descriptions with their code spans (docs/config.md), else plain text (a command's help).
    """
    flags = dict(flags or {})
    out: list[Section] = []

    def walk(klass: type, prefix: str, about: str, default: Any) -> None:
        docs, hints, subs = attribute_docs(klass, markdown=markdown), typing.get_type_hints(klass), section_types(klass)
        rows, nested = [], []
        for f in dataclasses.fields(klass):
            key = f"{prefix}{f.name}"
            if f.name in subs:
                section_default = None
                if f.default_factory is not dataclasses.MISSING:
                    section_default = f.default_factory()
                elif default is not None:
                    section_default = getattr(default, f.name)
                nested.append((subs[f.name], key, docs.get(f.name, ""), section_default))
                continue
            rows.append(
                Setting(key, type_name(hints[f.name]), _default_text(f, default), docs.get(f.name, ""), flags.get(key))
            )
        out.append(Section(prefix.rstrip("."), about, tuple(rows)))
        for sub, key, sub_about, sub_default in nested:
            # the parent's entry says what the section is for; "the sections." says nothing, the class does
            text = sub_about if len(sub_about) > 20 else _class_about(sub, markdown)
            walk(sub, key + ".", text, sub_default)

    walk(cls, "", _class_about(cls, markdown), None)
    return out


def undocumented(cls: type) -> list[str]:
    """The dotted keys of ``cls`` (and its sections) whose field has no docstring entry."""
    return [s.key for section in sections(cls) for s in section.settings if not s.help]


def _eval_flags() -> dict[str, str]:
    from tirl.cli.eval import EVAL_FLAGS

    return {fl.dotted_key: fl.decls[0] for fl in EVAL_FLAGS}


def configurations() -> list[tuple[str, type, str, dict[str, str]]]:
    """``(title, class, how it is given, {dotted key: flag})`` of each configuration the reference covers."""
    from tirl.eval.config import EvalConfig
    from tirl.train.config import RLConfig
    from tirl.train.sft_config import SFTConfig

    return [
        (
            "RL recipe (`tirl train rl`)",
            RLConfig,
            "`tirl train rl --config configs/rl/FILE.yaml KEY=VALUE ...` (`tirl.train.config.RLConfig`)",
            {},
        ),
        (
            "SFT recipe (`tirl train sft`)",
            SFTConfig,
            "`tirl train sft --config configs/sft/FILE.yaml KEY=VALUE ...` (`tirl.train.sft_config.SFTConfig`)",
            {},
        ),
        (
            "Evaluation (`tirl eval`)",
            EvalConfig,
            "`tirl eval --config configs/eval/FILE.yaml`, the flags below, or `KEY=VALUE` "
            "(`tirl.eval.config.EvalConfig`)",
            _eval_flags(),
        ),
    ]


def _cell(text: str) -> str:
    """Markdown text safe in a table cell (a ``|``, in a code span too, would end the cell)."""
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    return f"`{text}`".replace("|", "\\|")


def markdown() -> str:
    """The whole ``docs/config.md``."""
    lines = [
        "# Settings",
        "",
        "<!-- Generated by `python -m tirl.cli.config_reference > docs/config.md` from the configuration "
        "dataclasses' docstrings; edit those, not this file (tests/test_config_reference.py checks it). -->",
        "",
        "Every key of an RL recipe, an SFT recipe and an evaluation file: its dotted key (as in a YAML file, in "
        "`KEY=VALUE` and in `--print-config`), type, default and meaning. A recipe states only what differs from "
        "these defaults; `--print-config` prints the resolved result. Where each setting lives and why: "
        "[architecture.md](architecture.md#where-each-setting-lives).",
        "",
    ]
    for title, cls, given, flags in configurations():
        lines += [f"## {title}", "", f"Given as {given}.", ""]
        for section in sections(cls, flags, markdown=True):
            if not section.settings:
                continue
            heading = f"`{section.name}`" if section.name else "top level"
            lines += [f"### {title.split(' (')[0]}: {heading}", ""]
            if section.about:
                lines += [section.about, ""]
            head = "| key | type | default | meaning |"
            rule = "|---|---|---|---|"
            if flags:
                head, rule = head + " flag |", rule + "---|"
            lines += [head, rule]
            for s in section.settings:
                row = f"| {_code(s.key)} | {_code(s.type)} | {_code(s.default)} | {_cell(s.help)} |"
                if flags:
                    row += f" {_code(s.flag) if s.flag else ''} |"
                lines.append(row)
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def key_panels(cls: type) -> Iterator[tuple[str, list[tuple[str, str, str]]]]:
    """``(panel title, [(key, default, first sentence)])`` per section of ``cls``, for a command's help."""
    for section in sections(cls):
        if section.settings:
            title = f"{section.name} section" if section.name else "Top-level keys"
            rows = [(s.key, s.default, _first_sentence(s.help)) for s in section.settings]
            yield f"{title} (KEY=VALUE; docs/config.md)", rows


def keys_help_command(config_class: Callable[[], type]) -> type[TyperCommand]:
    """The click command class (typer's ``cls=``) of a command whose settings are ``KEY=VALUE`` arguments: its
    ``--help`` ends with one panel per section of the configuration ``config_class()`` returns, listing each key
    with its default and the first sentence of its description (as ``tirl eval --help`` lists its flags).
    ``config_class`` is called only when the help is shown."""

    def format_help(self: TyperCommand, ctx: Any, formatter: Any) -> None:
        TyperCommand.format_help(self, ctx, formatter)
        from rich.panel import Panel
        from rich.table import Table
        from typer import rich_utils

        console = rich_utils._get_rich_console()
        for title, rows in key_panels(config_class()):
            table = Table.grid(padding=(0, 1), expand=False)
            table.add_column(style="bold cyan", no_wrap=True)
            table.add_column(style="dim", no_wrap=True, max_width=24, overflow="ellipsis")
            table.add_column()
            for key, default, text in rows:
                table.add_row(key, default, text)
            console.print(Panel(table, title=title, title_align="left", border_style="dim"))

    return type("KeysHelpCommand", (TyperCommand,), {"format_help": format_help, "__doc__": keys_help_command.__doc__})


def main() -> None:
    """``python -m tirl.cli.config_reference``: print ``docs/config.md``."""
    import sys

    sys.stdout.write(markdown())


if __name__ == "__main__":  # pragma: no cover
    main()


__all__ = ["Section", "Setting", "keys_help_command", "key_panels", "markdown", "sections", "type_name", "undocumented"]
