"""The wire format between the verifier (caller's process) and its worker program (sandbox process).

Covers the request program text, the payload encoding and the decoding of the worker's answer. Standard
library only, so the caller never imports sympy or math-verify. The comparison itself is
:mod:`tirl.reward.worker`.

A request is an ``ExecutionRequest`` whose ``code`` is :data:`PROGRAM` and whose ``stdin`` is the JSON payload
``{"gold": str, "pred": str, "options": {...}}``; the worker prints one line ``TIRL-VERDICT {json}`` with
``{"status": "ok" | "unparsable_gold" | "verifier_error" | "timeout", "correct": bool, "detail": str | null}``.
"""

from __future__ import annotations

import json
from typing import Any

MARKER = "TIRL-VERDICT "
PROGRAM = "from tirl.reward.worker import main\nmain()\n"
# What a sandbox pool should import once for fast symbolic verification (``tirl.reward.warm`` runs a warm-up).
PRELOAD_MODULES: tuple[str, ...] = ("math_verify", "sympy", "latex2sympy2_extended", "tirl.reward.worker", "tirl.reward.warm")
WORKER_STATUSES = ("ok", "unparsable_gold", "verifier_error", "timeout")


def encode_payload(gold: str, pred: str, options: dict[str, Any]) -> str:
    """The stdin text of one worker request."""
    return json.dumps({"gold": gold, "pred": pred, "options": options})


def format_worker_output(result: dict[str, Any]) -> str:
    """The one stdout line a worker prints for ``result``."""
    return MARKER + json.dumps(result) + "\n"


def parse_worker_output(stdout: str) -> dict[str, Any] | None:
    """The verdict dict from a worker's stdout (its last ``TIRL-VERDICT`` line), or None when absent or invalid.

    A valid verdict has a known ``status`` and a boolean ``correct``; ``detail`` is kept when it is a string.
    """
    for line in reversed(stdout.splitlines()):
        if not line.startswith(MARKER):
            continue
        try:
            data = json.loads(line[len(MARKER) :])
        except ValueError:
            return None
        if not isinstance(data, dict) or data.get("status") not in WORKER_STATUSES:
            return None
        if not isinstance(data.get("correct"), bool):
            return None
        detail = data.get("detail")
        return {"status": data["status"], "correct": data["correct"], "detail": detail if isinstance(detail, str) else None}
    return None
