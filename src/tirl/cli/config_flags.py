"""Command-line flags generated from a configuration dataclass: one flag per setting, named after its key.

A command whose options are a configuration dataclass (``tirl eval``: :class:`tirl.eval.config.EvalConfig`)
declares no option by hand: :func:`config_flags` walks the dataclass's fields and makes one :class:`Flag` for
each scalar or list setting, named after the field (``max_turns`` -> ``--max-turns``; a boolean ``x`` is
``--x/--no-x``). The fields of nested sections (a field whose type is a dataclass: ``rollout``, ``protocol``)
are flags under their own name when no other setting has that name, else under their dotted key
(``protocol.answer_fallback`` -> ``--protocol.answer-fallback``, since ``answer_fallback`` is also a top-level
setting with a flag). Which sections get flags is the command's choice (a long section can stay reachable through
``key=value`` only); the help text of each flag is the field's entry in its class's ``Attributes:`` docstring,
so a setting is described in one place. :func:`command_signature` turns the flags into the signature typer
reads, :func:`flag_values` turns the parsed values back into the nested mapping of the configuration and
:func:`with_values` puts that mapping on a configuration. :data:`FLAG_NAMES` and :data:`PROTOCOL_FLAG_FIELDS`
are what every command shares, so the same setting has the same flag in ``tirl eval`` and ``tirl data ...``;
:func:`renamed_flags_command` refuses the names flags had before they were generated, naming the new one.
Importing this module loads no engine.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperCommand

from tirl.config import section_types  # defined there (tirl.eval.config uses it too); exported here as before

_MISSING = dataclasses.MISSING

FLAG_NAMES: dict[str, str] = {"sandbox.backend": "--sandbox", "protocol.answer_fallback": "--protocol.answer-fallback"}
"""Flags not named after their field alone, the same in every command: ``sandbox.backend`` is ``--sandbox``;
``protocol.answer_fallback`` is ``--protocol.answer-fallback`` also where no top-level ``answer_fallback`` setting
takes ``--answer-fallback`` (``tirl eval`` has one: :attr:`tirl.eval.config.EvalConfig.answer_fallback`)."""

PROTOCOL_FLAG_FIELDS: tuple[str, ...] = (
    "tool",
    "prompt_style",
    "tool_call_format",
    "answer_fallback",
    "multi_call",
    "lenient",
    "chat_template",
    "tool_response_max_chars",
)
"""The fields of the ``protocol`` section (:class:`tirl.protocol.config.ProtocolConfig`) that get flags."""


@dataclass(frozen=True)
class Flag:
    """One generated option.

    Attributes:
        key: the setting's place in the configuration (``("rollout", "max_turns")``).
        param: the Python parameter name typer passes the value under (the key joined with ``__``).
        decls: the option's declarations (``"--max-turns"``, ``"--x/--no-x"``, a short alias).
        annotation: the parameter's type for typer (``int | None``, ``list[str]``, an enum of the choices).
        default: the default typer shows (the dataclass's; ``[]`` for a list, None for a required field).
        help: the help text (the field's docstring entry).
        panel: the help panel it is listed in (one per section).
    """

    key: tuple[str, ...]
    param: str
    decls: tuple[str, ...]
    annotation: Any
    default: Any
    help: str
    panel: str | None

    @property
    def name(self) -> str:
        """The long option name (``--max-turns``; the on-switch of a boolean)."""
        return self.decls[0].split("/")[0]

    @property
    def dotted_key(self) -> str:
        """The setting's dotted key (``rollout.max_turns``), as in ``key=value`` and config files."""
        return ".".join(self.key)


def _clean(text: str) -> str:
    """A docstring fragment as plain help text: Sphinx roles and double backquotes removed."""
    text = re.sub(
        r":[a-z]+:`~?([^`]+)`", lambda m: m.group(1).rsplit(".", 1)[-1] if m.group(0).count("~") else m.group(1), text
    )
    text = text.replace("``", "")
    return re.sub(r"\s+", " ", text).strip()


def _first_sentence(text: str) -> str:
    """Text up to the first full stop outside parentheses that ends a sentence."""
    depth = 0
    for i, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth = max(0, depth - 1)
        elif ch == "." and depth == 0 and (i + 1 == len(text) or text[i + 1] == " ") and i > 0:
            before = text[max(0, i - 4) : i]
            if not before.endswith(("e.g", "i.e", "etc", "vs")):
                return text[: i + 1]
    return text


def _markdown(text: str) -> str:
    """A docstring fragment as Markdown: Sphinx roles and double backquotes become code spans."""
    text = re.sub(
        r":[a-z]+:`~?([^`]+)`",
        lambda m: "`" + (m.group(1).rsplit(".", 1)[-1] if m.group(0).count("~") else m.group(1)) + "`",
        text,
    )
    text = text.replace("``", "`")
    return re.sub(r"\s+", " ", text).strip()


def attribute_docs(cls: type, *, markdown: bool = False) -> dict[str, str]:
    """``{field: description}`` from the ``Attributes:`` sections of ``cls``'s docstring and its bases' (a
    subclass's entry wins; ``a, b: text`` and ``a / b: text`` describe both, and a list of names may go on
    over the next line when the line ends with a comma), cleaned of Sphinx markup (``markdown``: with code
    spans kept, for docs/config.md)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        doc = inspect.cleandoc(klass.__dict__.get("__doc__") or "")
        inside, names, parts = False, [], []
        entries: list[tuple[list[str], list[str]]] = []
        lines: list[str] = []
        for line in doc.splitlines():  # "    a, b,\n        c: text" is the entry "    a, b, c: text"
            if lines and re.match(r"^ {4}[A-Za-z_]\w*(?:, [A-Za-z_]\w*)*,$", lines[-1]):
                lines[-1] += " " + line.strip()
            else:
                lines.append(line)
        for line in lines:
            if line.strip() == "Attributes:":
                inside = True
                continue
            if not inside:
                continue
            if line and not line.startswith(" "):  # the next section (Raises:, ...)
                break
            entry = re.match(r"^ {4}([A-Za-z_]\w*(?:(?:, | / )[A-Za-z_]\w*)*): ?(.*)$", line)
            if entry:
                names, parts = re.split(r", | / ", entry.group(1)), [entry.group(2)]
                entries.append((names, parts))
            elif names and line.strip():
                parts.append(line.strip())
        for names, parts in entries:
            for n in names:
                docs[n] = (_markdown if markdown else _clean)(" ".join(parts))
    return docs


def _scalar(tp: Any) -> tuple[Any, bool] | None:
    """``(base type, optional)`` of a field type a flag can carry, or None (dicts, sections)."""
    optional = False
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        optional = len(args) < len(typing.get_args(tp))
        if len(args) != 1:
            return None
        tp = args[0]
    origin = typing.get_origin(tp)
    if origin in (list, tuple):
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        item = args[0] if args else str
        if item in (str, int, float, Path):
            return list, optional
        return None
    if origin is typing.Literal or tp in (bool, int, float, str, Path):
        return tp, optional
    return None


def _choices_enum(name: str, values: Iterable[Any]) -> type[enum.Enum]:
    return enum.Enum(name, {str(v): str(v) for v in values}, type=str)  # type: ignore[return-value]


def _default(f: dataclasses.Field) -> Any:
    if f.default is not _MISSING:
        return f.default
    if f.default_factory is not _MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return None


def config_flags(
    cls: type,
    sections: Mapping[str, Iterable[str] | None],
    *,
    short: Mapping[str, str] | None = None,
    help_extra: Mapping[str, str] | None = None,
    panels: Mapping[str, str] | None = None,
    names: Mapping[str, str] | None = None,
) -> list[Flag]:
    """The flags of configuration dataclass ``cls``: every top-level setting a flag can carry, and those of the
    sections named in ``sections``.

    Args:
        cls: the configuration dataclass (its scalar, literal and list fields become flags; dict fields and the
            sections not in ``sections`` do not, and stay reachable through ``key=value``).
        sections: ``{section: field names}`` of the sections that get flags; None takes all of a section's
            fields.
        short: ``{dotted key: "-x"}`` one-letter aliases.
        help_extra: ``{dotted key: text}`` appended to a flag's docstring help (what the command does with it).
        panels: ``{section: title}`` of the help panels ("" is the top level); default: the section's name.
        names: ``{dotted key: "--name"}`` the flag's name where the section's field name alone would not say
            what it sets (``sandbox.backend`` is ``--sandbox``, the name every tirl command uses for it); still
            one name per setting.

    Raises:
        ValueError: two settings would get the same flag name, or a named section or field does not exist.
    """
    short, help_extra, panels = dict(short or {}), dict(help_extra or {}), dict(panels or {})
    renamed = dict(names or {})
    subs = section_types(cls)
    unknown = sorted(set(sections) - set(subs))
    if unknown:
        raise ValueError(f"not sections of {cls.__name__}: {', '.join(unknown)}")
    candidates: list[tuple[tuple[str, ...], dataclasses.Field, Any, dict[str, str]]] = []
    top_docs, top_hints = attribute_docs(cls), typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name not in subs:
            candidates.append(((f.name,), f, top_hints[f.name], top_docs))
    section_defaults: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in sections:
            section_defaults[f.name] = _default(f)  # the parent's default of the section (its own, or None)
    for section, names in sections.items():
        sub = subs[section]
        hints, docs = typing.get_type_hints(sub), attribute_docs(sub)
        fields = {f.name: f for f in dataclasses.fields(sub)}
        wanted = list(fields) if names is None else list(names)
        missing = [n for n in wanted if n not in fields]
        if missing:
            raise ValueError(f"not fields of {section}: {', '.join(missing)}")
        candidates += [((section, n), fields[n], hints[n], docs) for n in wanted]
    # a leaf name that more than one flagged setting has is qualified, except at the top (so a section added
    # without flags renames no flag)
    leaf_count: dict[str, int] = {}
    for key, _f, tp, _ in candidates:
        if _scalar(tp) is not None:
            leaf_count[key[-1]] = leaf_count.get(key[-1], 0) + 1
    flags: list[Flag] = []
    for key, f, tp, docs in candidates:
        kind = _scalar(tp)
        if kind is None:
            continue
        base, optional = kind
        dotted = ".".join(key)
        leaf = key[-1]
        qualified = len(key) > 1 and leaf_count.get(leaf, 0) > 1
        long = renamed.get(dotted) or "--" + (dotted if qualified else leaf).replace("_", "-")
        default = _default(f)
        parent_default = section_defaults.get(key[0]) if len(key) > 1 else None
        if parent_default is not None:  # SamplerConfig's sandbox has 2 workers, not ExecutorConfig's None
            default = getattr(parent_default, leaf, default)
        if base is bool:
            decls: tuple[str, ...] = (f"{long}/--no-{long[2:]}",)
            annotation: Any = bool | None if optional else bool
        elif base is list:
            decls, annotation, default = (long,), list[str], []
        elif typing.get_origin(base) is typing.Literal:
            choices = _choices_enum(
                "".join(p.title() for p in dotted.replace(".", "_").split("_")), typing.get_args(base)
            )
            decls, annotation = (long,), choices | None if optional else choices
            default = None if default is None else choices(str(default))
        else:
            decls, annotation = (long,), base | None
        if dotted in short:
            decls = (*decls, short[dotted])
        text = _first_sentence(docs.get(leaf, ""))
        if dotted in help_extra:
            text = f"{text} {help_extra[dotted]}".strip()
        panel_key = key[0] if len(key) > 1 else ""
        flags.append(
            Flag(
                key=key,
                param="__".join(key),
                decls=decls,
                annotation=annotation,
                default=default,
                help=text,
                panel=panels.get(panel_key, panel_key or None),
            )
        )
    flag_names = [fl.name for fl in flags]
    dupes = sorted({n for n in flag_names if flag_names.count(n) > 1})
    if dupes:
        raise ValueError(f"flag name(s) {', '.join(dupes)} would name two settings")
    return flags


def command_signature(
    head: list[inspect.Parameter], flags: list[Flag], tail: list[inspect.Parameter]
) -> tuple[inspect.Signature, dict[str, Any]]:
    """The signature (and the annotations) typer reads for a command with the hand-written parameters
    ``head`` and ``tail`` around the generated ``flags``."""
    params = list(head)
    for fl in flags:
        shown = fl.default not in (None, []) or fl.annotation is bool
        option = typer.Option(fl.default, *fl.decls, help=fl.help, rich_help_panel=fl.panel, show_default=shown)
        params.append(
            inspect.Parameter(fl.param, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=fl.annotation)
        )
    params += tail
    kinds = [
        p.replace(kind=inspect.Parameter.KEYWORD_ONLY) if p.kind is not inspect.Parameter.KEYWORD_ONLY else p
        for p in params
    ]
    return inspect.Signature(kinds), {p.name: p.annotation for p in kinds}


def with_flags(
    func: Callable[..., Any], head: list[inspect.Parameter], flags: list[Flag], tail: list[inspect.Parameter]
) -> Callable[..., Any]:
    """``func`` (which takes ``**values``) with the signature of :func:`command_signature`, for typer."""
    signature, annotations = command_signature(head, flags, tail)
    func.__signature__ = signature  # type: ignore[attr-defined]
    func.__annotations__ = annotations
    return func


def flag_values(flags: list[Flag], values: Mapping[str, Any], given: Callable[[str], bool]) -> dict[str, Any]:
    """The nested configuration mapping (``{"rollout": {"max_turns": 3}}``) of the flags given on the command
    line: ``values`` by parameter name, ``given(param)`` whether it was set there (not its default). Choices
    become their strings, paths strings; a list flag's entries are split at commas."""
    out: dict[str, Any] = {}
    for fl in flags:
        if not given(fl.param):
            continue
        value = values[fl.param]
        if isinstance(value, enum.Enum):
            value = value.value
        elif isinstance(value, Path):
            value = str(value)
        elif isinstance(value, (list, tuple)):
            value = [v.strip() for item in value for v in str(item).split(",") if v.strip()]
        node = out
        for part in fl.key[:-1]:
            node = node.setdefault(part, {})
        node[fl.key[-1]] = value
    return out


def with_values(config: Any, values: Mapping[str, Any]) -> Any:
    """A copy of configuration dataclass ``config`` with the settings of ``values`` (the nested mapping of
    :func:`flag_values`) replaced; a section keeps its other settings (``config``'s, not its class's
    defaults), and each dataclass's own validation runs.

    Raises:
        ValueError: a key that is not a field, or what the dataclass's validation raises.
    """
    names = {f.name for f in dataclasses.fields(config)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"not settings of {type(config).__name__}: {', '.join(unknown)}")
    changes: dict[str, Any] = {}
    for key, value in values.items():
        current = getattr(config, key)
        if isinstance(value, Mapping) and dataclasses.is_dataclass(current):
            changes[key] = with_values(current, value)
        else:
            changes[key] = value
    return dataclasses.replace(config, **changes)


def given_on_command_line(ctx: typer.Context) -> Callable[[str], bool]:
    """``given(name)``: whether parameter ``name`` of the command of ``ctx`` was set on the command line (not
    left at its default), as :func:`flag_values` takes it."""

    def given(name: str) -> bool:
        source = ctx.get_parameter_source(name)
        return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")

    return given


def renamed_flags_command(command: str, renamed: Mapping[str, str]) -> type[TyperCommand]:
    """The click command class (typer's ``cls=``) of a command whose flags of earlier versions, ``renamed``
    (``{old flag: new flag}``), are refused: exit code 2 and one line, ``COMMAND: --old is now --new``. Alone,
    the parser would suggest the closest name (``--max-turns`` for ``--max-tokens``). ``command`` is the
    command's name in the message (``tirl data curate``)."""
    table = dict(renamed)

    def parse_args(self: TyperCommand, ctx: typer.Context, args: list[str]) -> list[str]:
        """Refuse the renamed flags, then parse as usual."""
        for arg in args:
            if arg == "--":
                break
            name = arg.split("=", 1)[0]
            if name in table:
                typer.secho(
                    f"{command}: {name} is now {table[name]} (each flag is named after its setting; "
                    f"{command} --help lists them)",
                    fg="red",
                    err=True,
                )
                raise typer.Exit(2)
        return TyperCommand.parse_args(self, ctx, args)

    name = "".join(part.title() for part in re.split(r"[\s_-]+", command)) + "Command"
    doc = f"The click command of ``{command}``: a flag of {sorted(table)} is a usage error naming its new flag."
    return type(name, (TyperCommand,), {"parse_args": parse_args, "__doc__": doc, "renamed_flags": table})


__all__ = [
    "FLAG_NAMES",
    "PROTOCOL_FLAG_FIELDS",
    "Flag",
    "attribute_docs",
    "command_signature",
    "config_flags",
    "flag_values",
    "given_on_command_line",
    "renamed_flags_command",
    "section_types",
    "with_flags",
    "with_values",
]
