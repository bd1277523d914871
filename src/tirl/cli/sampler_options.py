"""The policy-sampling flags that ``tirl data filter-hard`` and ``tirl data curate`` share, generated once.

:data:`SAMPLER_FLAGS` is one flag per setting of :class:`tirl.runtime.sampler.SamplerConfig` (its
:class:`AgentLoopSettings` fields, ``batch_size``, ``seed``) and of the common fields of its ``sandbox`` and
``protocol`` sections, made by :func:`tirl.cli.config_flags.config_flags` with the names ``tirl eval`` gives the
same settings (``--max-response-tokens``, ``--tool-timeout-s``, ``--sandbox``, ``--workers``, ``--prompt-style``),
the help of the field's docstring and the dataclass's default. :func:`sampler_config` turns the parsed flags into
the :class:`SamplerConfig`. The sampler's other settings (the rest of ``sandbox`` and ``protocol``, ``verifier``)
have no flag on these commands. ``--dtype``, not a sampler setting, is written here by hand under the name
``tirl eval`` uses. Importing this module loads no heavy library.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import typer

from tirl.cli.config_flags import FLAG_NAMES, PROTOCOL_FLAG_FIELDS, config_flags, flag_values, with_values
from tirl.runtime.sampler import SamplerConfig

SAMPLER_SECTIONS: dict[str, tuple[str, ...] | None] = {
    "sandbox": ("backend", "workers"),
    "protocol": PROTOCOL_FLAG_FIELDS,
}
"""The sections of :class:`SamplerConfig` whose settings get flags (as in ``tirl eval``)."""

SAMPLER_FLAGS = config_flags(
    SamplerConfig,
    SAMPLER_SECTIONS,
    names=FLAG_NAMES,
    panels={
        "": "Sampling settings (tirl.runtime.sampler.SamplerConfig)",
        "sandbox": "Where the code runs (sandbox section)",
        "protocol": "Conversation format (protocol section): the policy's, as in its RL recipe",
    },
)
"""The generated flags of the policy sampler (:func:`tirl.cli.config_flags.config_flags` of
:class:`SamplerConfig`)."""

RENAMED_FLAGS = {"--max-tokens": "--max-response-tokens", "--tool-timeout": "--tool-timeout-s"}
"""Sampler flags of earlier versions whose name was not their setting's: not accepted, only named in the error."""

DTYPE = inspect.Parameter(
    "dtype",
    inspect.Parameter.KEYWORD_ONLY,
    annotation=str,
    default=typer.Option("bfloat16", "--dtype", help="Weights of the policy (bfloat16, float32, auto)."),
)
"""``--dtype``: the policy's weights (a loading option, not a :class:`SamplerConfig` setting)."""


def sampler_config(values: Mapping[str, Any], given: Callable[[str], bool]) -> SamplerConfig:
    """The :class:`SamplerConfig` of the parsed :data:`SAMPLER_FLAGS` in ``values`` (``{parameter: value}``):
    its defaults with the flags set on the command line (``given(parameter)``) on top.

    Raises:
        ValueError: a value the configuration refuses (``max_turns`` 0, a bad ``--sandbox``).
    """
    return with_values(SamplerConfig(), flag_values(SAMPLER_FLAGS, values, given))


__all__ = ["DTYPE", "RENAMED_FLAGS", "SAMPLER_FLAGS", "SAMPLER_SECTIONS", "sampler_config"]
