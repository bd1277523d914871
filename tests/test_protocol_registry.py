"""The registry behind the tool and tool-call-format seams (tirl.protocol.registry)."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

import pytest

from tirl.protocol.formats import format_names, get_format
from tirl.protocol.registry import Registry
from tirl.protocol.tools import get_tool, register_tool, tool_names, unregister_tool


@dataclass(eq=False)
class Entry:
    name: str


def test_register_get_and_unregister_an_entry():
    reg: Registry[Entry] = Registry("widget", "widget_name", {})
    first = reg.register(Entry("a"))
    assert reg.get("a") is first and reg.names() == ("a",)
    assert reg.register(first) is first  # the same object again is a no-op
    with pytest.raises(ValueError, match="widget 'a' is already registered"):
        reg.register(Entry("a"))
    second = reg.register(Entry("a"), replace=True)
    assert reg.get("a") is second
    assert reg.unregister("a") is second and reg.unregister("a") is None
    with pytest.raises(ValueError, match=r"widget_name must be one of , got 'a'"):
        reg.get("a")


def test_an_empty_name_and_a_name_that_is_not_a_string_are_refused_with_the_setting():
    reg: Registry[Entry] = Registry("widget", "widget_name", {})
    with pytest.raises(ValueError, match="a widget needs a non-empty name"):
        reg.register(Entry(""))
    reg.register(Entry("b"))
    for bad in (None, 3, ["b"], {"b": 1}):
        with pytest.raises(ValueError, match="widget_name must be one of b, got"):
            reg.get(bad)  # type: ignore[arg-type]


def test_a_built_in_is_imported_on_first_use_and_listed_before_it_is(tmp_path, monkeypatch):
    (tmp_path / "widget_holder.py").write_text(
        "from tirl.protocol.registry import Registry\n"
        "REG = Registry('widget', 'widget_name', {'lazy': 'widget_lazy', 'silent': 'widget_silent'})\n"
    )
    (tmp_path / "widget_lazy.py").write_text(
        "from types import SimpleNamespace\nfrom widget_holder import REG\nREG.register(SimpleNamespace(name='lazy'))\n"
    )
    (tmp_path / "widget_silent.py").write_text("# registers nothing\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for module in ("widget_holder", "widget_lazy", "widget_silent"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    reg = importlib.import_module("widget_holder").REG
    assert reg.names() == ("lazy", "silent") and "widget_lazy" not in sys.modules
    assert reg.get("lazy").name == "lazy" and "widget_lazy" in sys.modules
    # a built-in whose module does not register it is an unknown name, not None
    with pytest.raises(ValueError, match="widget_name must be one of lazy, silent, got 'silent'"):
        reg.get("silent")


def test_tools_and_formats_keep_built_ins_first_and_remove_what_a_user_registered():
    assert tool_names()[:2] == ("python", "python_session")
    assert format_names()[:2] == ("hermes", "qwen3_xml")
    assert get_format("qwen3_xml").name == "qwen3_xml"

    class Echo(type(get_tool("python"))):
        name = "test_registry_echo"

    echo = register_tool(Echo())
    try:
        assert "test_registry_echo" in tool_names() and get_tool("test_registry_echo") is echo
    finally:
        assert unregister_tool("test_registry_echo") is echo
    assert "test_registry_echo" not in tool_names()
    with pytest.raises(ValueError, match="tool must be one of python, python_session"):
        get_tool("test_registry_echo")
