"""Evaluation modes by name: how a model is asked to solve the problems (prompt, tool, turns), in one place.

A mode is the part of an evaluation's settings that says *how* the model is evaluated, not on what or for how
long: the protocol's prompt style, whether the Python tool is offered, and for the chain-of-thought baseline its
one turn. The field compares a model in its own format (docs/protocol.md, "Prompt styles and the field's
baselines"); tirl's trained models are evaluated in the format they were trained in:

* ``cot`` (``protocol.prompt_style: cot``, no tool, 1 turn): the field's chain-of-thought baseline: the model's
  chat template and default system prompt, the problem followed by Qwen's "Please reason step by step, and put
  your final answer within \\boxed{}.", no tags, no prefill; the answer is the last box.
* ``tool-native`` (``native``, the tool): the Python tool in the model's own tool-calling format (Qwen2.5: its
  template's Hermes block and ``<tool_call>`` JSON), the same user turn, no tags, no prefill.
* ``tool-full`` (``full``, the tool): tirl's format (``<reason>``/``<answer>`` tags, the ``<reason>`` prefill, the
  tool's schema in the system prompt): ``tirl eval``'s default.
* ``tool-compact`` (``compact``, the tool): tirl's format with its short prompt, the format the packaged trained
  models were trained in (their ``manifest.json``'s ``prompt_style``).

``configs/eval/*-cot.yaml`` are in mode ``cot``, ``*-tool.yaml`` in ``tool-native`` (``tests/test_eval_modes.py``
fails when a file drifts from its mode); ``tirl demo`` (:mod:`tirl.eval.demo`) names each row's mode; an
:class:`~tirl.eval.config.EvalConfig`'s table title says its mode (:meth:`EvalConfig.mode_label`). Budgets
(turns of the tool modes, tokens), samples and benchmarks stay the run's: they are sized per benchmark.

Not covered: ``tirl eval --no-use-tools`` with tirl's styles (tirl's tags without the tool, an ablation, not a
baseline of the field): it is in no mode.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tirl.protocol.config import PromptStyle

if TYPE_CHECKING:  # only for annotations: tirl.eval.config imports this module
    from tirl.eval.config import EvalConfig


@dataclass(frozen=True)
class EvalMode:
    """One named way of evaluating a model.

    Attributes:
        name: the mode's name (``cot``, ``tool-native``, ...).
        prompt_style: the protocol's ``prompt_style`` (:class:`tirl.protocol.ProtocolConfig`).
        use_tools: whether the Python tool is offered and run (``EvalConfig.use_tools``).
        max_turns: assistant turns fixed by the mode (``cot``: 1, it has no tool to answer); None leaves
            ``rollout.max_turns`` to the run.
        description: what the mode measures, in words (the table's title).
    """

    name: str
    prompt_style: PromptStyle
    use_tools: bool
    max_turns: int | None
    description: str

    def overrides(self) -> dict[str, Any]:
        """The mode as ``tirl eval`` ``KEY=VALUE`` settings (dotted keys of :class:`EvalConfig`)."""
        out: dict[str, Any] = {"protocol.prompt_style": self.prompt_style, "use_tools": self.use_tools}
        if self.max_turns is not None:
            out["rollout.max_turns"] = self.max_turns
        return out

    def apply(self, config: EvalConfig) -> EvalConfig:
        """A copy of ``config`` evaluated in this mode (every other setting kept)."""
        rollout = config.rollout
        if self.max_turns is not None:
            rollout = dataclasses.replace(rollout, max_turns=self.max_turns)
        return dataclasses.replace(
            config,
            protocol=dataclasses.replace(config.protocol, prompt_style=self.prompt_style),
            use_tools=self.use_tools,
            rollout=rollout,
        )

    def holds_for(self, config: EvalConfig) -> bool:
        """True when ``config`` shows the model what this mode shows it: the prompt style and the tool.

        ``max_turns`` is not compared: without a tool the first turn is the last whatever the limit, so a
        ``--prompt-style cot`` run with 30 turns measures the same chain of thought (``apply`` records 1).
        """
        return config.protocol.prompt_style == self.prompt_style and config.use_tools == self.use_tools


MODES: dict[str, EvalMode] = {
    m.name: m
    for m in (
        EvalMode("cot", "cot", False, 1, "chain of thought (the model's template, no tool)"),
        EvalMode("tool-native", "native", True, None, "the Python tool in the model's own tool format"),
        EvalMode("tool-full", "full", True, None, "with the Python tool (tirl's format)"),
        EvalMode("tool-compact", "compact", True, None, "with the Python tool (tirl's format, compact prompt)"),
    )
}
"""The modes by name, in the order above."""


def get_mode(name: str) -> EvalMode:
    """The mode called ``name``.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    try:
        return MODES[name]
    except KeyError:
        raise ValueError(f"unknown evaluation mode {name!r}: one of {', '.join(MODES)}") from None


def mode_of(config: EvalConfig) -> EvalMode | None:
    """The mode ``config`` is in (:meth:`EvalMode.holds_for`), or None (tirl's tags without the tool)."""
    return next((m for m in MODES.values() if m.holds_for(config)), None)


__all__ = ["MODES", "EvalMode", "get_mode", "mode_of"]
