"""The wire format between the verifier (caller's process) and its worker program (sandbox process).

Covers the request program text, the payload encoding and the decoding of the worker's answers. Standard
library only, so the caller never imports sympy or math-verify. The comparison itself is
:mod:`tirl.reward.worker`.

A request is an ``ExecutionRequest`` whose ``code`` is :data:`PROGRAM` and whose ``stdin`` is the JSON payload
``{"items": [[gold, pred], ...], "options": {...}}`` (a *chunk* of one or more comparisons). The worker
answers each item as soon as it is decided, one stdout line per item, flushed:
``TIRL-VERDICT {"i": index, "status": one of WORKER_STATUSES,
"correct": bool, "detail": str | null, "seconds": float}``. Lines of a chunk that was killed at its deadline
are kept by the executor, so the verdicts given before the kill are not lost.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

MARKER = "TIRL-VERDICT "
PROGRAM = "from tirl.reward.worker import main\nmain()\n"
# What a sandbox pool should import once for fast symbolic verification (``tirl.reward.warm`` runs a warm-up).
PRELOAD_MODULES: tuple[str, ...] = (
    "math_verify",
    "sympy",
    "latex2sympy2_extended",
    "tirl.reward.worker",
    "tirl.reward.warm",
)
# Every status the worker prints (a line with another status is ignored, and its item re-run, then
# ``verifier_error``): ``hedged`` from the worker's own commitment check, ``verifier_bug`` when grading raised.
WORKER_STATUSES = ("ok", "hedged", "unparsable_gold", "verifier_error", "verifier_bug", "timeout")


def encode_payload(items: Sequence[tuple[str, str]], options: dict[str, Any]) -> str:
    """The stdin text of one worker request: ``items`` are ``(gold, pred)`` pairs, in answer order."""
    return json.dumps({"items": [[gold, pred] for gold, pred in items], "options": options})


def format_worker_output(index: int, result: dict[str, Any]) -> str:
    """The stdout line a worker prints for item ``index`` (``result``: status, correct, detail, seconds)."""
    return MARKER + json.dumps({"i": index, **result}) + "\n"


def parse_worker_output(stdout: str) -> dict[int, dict[str, Any]]:
    """The verdicts in a worker's stdout, by item index.

    Lines that are not verdict lines, or are malformed (bad JSON, unknown status, non-boolean ``correct``,
    missing or negative index), are ignored; for an index given twice the last line wins. Each verdict is
    ``{"status", "correct", "detail" (str or None), "seconds" (float >= 0)}``.
    """
    verdicts: dict[int, dict[str, Any]] = {}
    for line in stdout.splitlines():
        if not line.startswith(MARKER):
            continue
        try:
            data = json.loads(line[len(MARKER) :])
        except ValueError:
            continue
        if not isinstance(data, dict) or data.get("status") not in WORKER_STATUSES:
            continue
        index = data.get("i")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            continue
        if not isinstance(data.get("correct"), bool):
            continue
        detail = data.get("detail")
        seconds = data.get("seconds")
        verdicts[index] = {
            "status": data["status"],
            "correct": data["correct"],
            "detail": detail if isinstance(detail, str) else None,
            "seconds": float(seconds) if isinstance(seconds, (int, float)) and seconds >= 0 else 0.0,
        }
    return verdicts
