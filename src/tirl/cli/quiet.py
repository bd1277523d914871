"""Third-party warnings that tirl knows to be harmless on its own paths, filtered for every ``tirl`` command.

Covers :data:`KNOWN_HARMLESS` (category, the message's start, why it is harmless) and :func:`filter_known_warnings`,
which the root command calls. Each entry was met on the shipped recipes' normal path (``tirl train rl --config
configs/rl/cpu-toolmath-roc.yaml``, ``tirl eval`` of its checkpoint) and says nothing the user can or should act on;
every other warning is shown, once per process (``tirl.cli.train``). ``TIRL_ALL_WARNINGS=1`` in the environment
shows these too.

Not covered: warnings of code run outside the ``tirl`` command (a script importing tirl keeps Python's defaults).
"""

from __future__ import annotations

import os
import warnings

KNOWN_HARMLESS: tuple[tuple[type[Warning], str, str], ...] = (
    (
        FutureWarning,
        r"`gradient_checkpointing` is deprecated",
        "transformers 5 renamed TrainingArguments.gradient_checkpointing to activation_checkpointing; TRL's config "
        "sets the old name, which transformers maps to the new one until v6",
    ),
    (
        FutureWarning,
        r"`is_gradient_checkpointing` is deprecated",
        "the same rename, on the model: peft and TRL ask the old property, which still answers",
    ),
    (
        FutureWarning,
        r"`past_key_values` is deprecated",
        "TRL's forward wrapper passes the old keyword of the model's forward; the cache is not used in training",
    ),
    (
        UserWarning,
        r"'pin_memory' argument is set as true but no accelerator is found",
        "torch's data loader on a CPU-only machine: pinning is skipped, which is what a CPU run needs",
    ),
)
"""``(category, regular expression matching the start of the message, why tirl knows it is harmless)``."""


def filter_known_warnings() -> None:
    """Ignore the warnings of :data:`KNOWN_HARMLESS` in this process, unless ``TIRL_ALL_WARNINGS`` is set to a
    non-empty value other than ``0``."""
    if os.environ.get("TIRL_ALL_WARNINGS", "") not in ("", "0"):
        return
    for category, message, _why in KNOWN_HARMLESS:
        warnings.filterwarnings("ignore", message=message, category=category)


__all__ = ["KNOWN_HARMLESS", "filter_known_warnings"]
