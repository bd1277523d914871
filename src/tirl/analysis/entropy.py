"""Token entropy of saved trajectories: re-scoring, the report's forking/reflection statistics, comparison.

rStar2-Agent (arXiv 2508.20722, Section 6, "analysis of what RL changes") studies the entropy of the policy's
next-token distribution on its own trajectories: high-entropy "forking" tokens in reasoning (the 80/20 view of
Wang et al., arXiv 2506.01939: a minority of high-entropy tokens carries the decisions) and high-entropy
"reflection" tokens right after a tool response, where the model reacts to execution feedback. This module:

1. **re-scores** every saved trajectory with a model on the exact saved token ids (``prompt_ids`` +
   ``response_ids`` written by ``tirl eval`` and training's ``logging.log_trajectories``; nothing is
   re-tokenised): one forward pass per trajectory, and for each response token ``t`` the entropy
   ``H_t = -sum_v p(v | prefix) log p(v | prefix)`` in **nats** of the model's distribution (temperature 1,
   no top-p) at the position that predicts it. The LM head is applied in chunks so the full
   ``length x vocabulary`` logits never exist at once. Injected tokens (loss mask 0) get no entropy;
2. writes ``RUN_DIR/entropy/<label>.jsonl`` (one line per trajectory: ``id``, ``model``, ``entropy`` aligned
   with ``response_ids`` with ``null`` on injected tokens, ``tokens`` = each response id decoded alone) so
   ``tirl view`` can colour tokens; an existing file is extended, trajectories already scored are skipped;
3. reports, per label: the entropy distribution (mean, quantiles, histogram), the top high-entropy tokens
   (tokens at or above the label's 80th percentile, counted by their text: the "forking tokens"), and the mean
   entropy of the first ``k`` model tokens after each tool response versus all other model tokens (the
   "reflection" comparison). Several labels (checkpoints) scored on the same trajectories are reported side
   by side, which shows what training changed.

Not covered: entropy under the sampling temperature or top-p (the raw distribution is used, as in the
report's analysis), models whose final logits are post-processed beyond the LM head (e.g. Gemma's soft-capping).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tirl.view.load import ENTROPY_DIR, iter_token_records, read_entropy, read_run

HIGH_QUANTILE = 0.8
"""Tokens at or above this quantile of a label's entropies are "high-entropy" (top 20%, Wang et al. 2025)."""


def token_entropies(
    model: Any, prompt_ids: Sequence[int], response_ids: Sequence[int], *, chunk: int = 256
) -> list[float]:
    """Entropy (nats) of the model's next-token distribution at every response token.

    Args:
        model: a transformers causal LM (``base_model`` + ``get_output_embeddings()``), in eval mode.
        prompt_ids: the prompt's token ids (length P >= 1).
        response_ids: the response's token ids (length R).
        chunk: positions per LM-head application (memory: ``chunk x vocabulary`` floats).

    Returns:
        ``R`` floats; entry ``t`` is the entropy of ``p(. | prompt, response[:t])``.

    Raises:
        ValueError: an empty prompt.
    """
    import torch

    if not prompt_ids:
        raise ValueError("token_entropies needs a non-empty prompt (the first response token is predicted from it)")
    if not response_ids:
        return []
    ids = torch.tensor([list(prompt_ids) + list(response_ids)], dtype=torch.long, device=model.device)
    head = model.get_output_embeddings()
    out: list[float] = []
    with torch.no_grad():
        hidden = model.base_model(input_ids=ids).last_hidden_state[0]
        start, end = len(prompt_ids) - 1, ids.shape[1] - 1  # positions predicting response tokens
        for a in range(start, end, chunk):
            logits = head(hidden[a : min(end, a + chunk)]).float()
            logp = torch.log_softmax(logits, dim=-1)
            out.extend((-(logp.exp() * logp).sum(-1)).tolist())
    return out


def label_for(model: str) -> str:
    """A file-name-safe label for a model reference (its last path part)."""
    name = Path(str(model).rstrip("/")).name or str(model)
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name.replace(":", "-")).strip("-") or "model"


def score_run(
    run_dir: str | Path,
    model: Any,
    tokenizer: Any,
    label: str,
    *,
    model_name: str = "",
    limit: int | None = None,
    progress: Any = None,
) -> Path:
    """Re-score a run's trajectories and append them to ``RUN_DIR/entropy/<label>.jsonl``.

    Trajectories without saved token ids (older files) are skipped; already scored ones (same id in the
    file) are not redone. Each line is flushed as it is written.

    Args:
        run_dir: an eval or training run folder (see :func:`tirl.view.load.read_run`).
        model, tokenizer: the model to score with (eval mode) and its tokenizer (only decodes single ids).
        label: the file's name (see :func:`label_for`).
        model_name: recorded in each line.
        limit: score at most this many trajectories (in file order).
        progress: ``callable(done, total)`` or None.

    Returns:
        The path of the entropy file.

    Raises:
        FileNotFoundError: no trajectories in ``run_dir``.
        ValueError: no trajectory holds token ids (files written before tirl stored them).
    """
    run = read_run(run_dir)
    todo = list(iter_token_records(run))
    if not todo:
        raise ValueError(
            f"no trajectory in {run_dir} holds prompt_ids/response_ids/loss_mask; re-run it with this "
            "tirl version (older files store text only)"
        )
    if limit is not None:
        todo = todo[:limit]
    folder = run.root / ENTROPY_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{label}.jsonl"
    done = set(read_entropy(run.root).get(label, {}))
    todo = [(rid, rec) for rid, rec in todo if rid not in done]
    with open(path, "a", encoding="utf-8") as fh:
        for n, (rid, rec) in enumerate(todo):
            ents = token_entropies(model, rec["prompt_ids"], rec["response_ids"])
            mask = rec["loss_mask"]
            fh.write(
                json.dumps(
                    {
                        "id": rid,
                        "model": model_name,
                        "entropy": [round(e, 5) if m else None for e, m in zip(ents, mask)],
                        "tokens": [tokenizer.decode([t], skip_special_tokens=False) for t in rec["response_ids"]],
                    },
                    ensure_ascii=False,
                )
                + "\n"
            )
            fh.flush()
            if progress is not None:
                progress(n + 1, len(todo))
    return path


# --------------------------------------------------------------------------------------------------------------
# statistics


def post_tool_positions(mask: Sequence[int], k: int) -> set[int]:
    """Indices of the first ``k`` model tokens (mask 1) after each injected run (mask 0) that follows model text.

    The prompt's pre-filled tokens are not in the response, so every injected run inside a response is a tool
    response segment. Example: mask ``1 1 0 0 1 1 1`` with ``k=2`` gives ``{4, 5}``.
    """
    out: set[int] = set()
    seen_model = False
    i, n = 0, len(mask)
    while i < n:
        if mask[i]:
            seen_model = True
            i += 1
            continue
        while i < n and not mask[i]:  # skip the injected run
            i += 1
        if seen_model:
            j = i
            while j < n and j < i + k and mask[j]:
                out.add(j)
                j += 1
    return out


@dataclass
class LabelStats:
    """Entropy statistics of one label (model) over the scored trajectories."""

    label: str
    trajectories: int
    tokens: int
    mean: float
    quantiles: dict[str, float]
    high_threshold: float
    histogram: dict[str, list[float]]
    forking: list[dict[str, Any]]
    post_tool: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _quantile(sorted_vals: Sequence[float], q: float) -> float:
    if not sorted_vals:
        return float("nan")
    pos = q * (len(sorted_vals) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def label_stats(
    label: str,
    rows: Iterable[dict[str, Any]],
    masks: dict[str, Sequence[int]],
    *,
    first_k: int = 10,
    top: int = 30,
    bins: int = 40,
    max_nats: float | None = None,
) -> LabelStats:
    """Statistics of one label's entropy rows (see the module docstring).

    Args:
        rows: lines of ``entropy/<label>.jsonl``.
        masks: loss mask per trajectory id (from the run's records).
        first_k: model tokens after each tool response that count as "post-tool".
        top: forking tokens listed.
        bins, max_nats: histogram bins over ``[0, max_nats]`` (default: the largest entropy).
    """
    values: list[float] = []
    post, other = [], []
    high_tokens: list[tuple[str, float]] = []
    all_counts: Counter[str] = Counter()
    rows = list(rows)
    per_token: list[tuple[str, float]] = []
    for row in rows:
        ents, toks = row.get("entropy") or [], row.get("tokens") or []
        mask = masks.get(str(row.get("id")), [0 if e is None else 1 for e in ents])
        near = post_tool_positions(mask, first_k)
        for i, e in enumerate(ents):
            if e is None:
                continue
            values.append(float(e))
            (post if i in near else other).append(float(e))
            per_token.append((toks[i] if i < len(toks) else "?", float(e)))
    s = sorted(values)
    threshold = _quantile(s, HIGH_QUANTILE)
    for tok, e in per_token:
        key = tok.strip() or tok  # whitespace-only tokens keep their whitespace (shown with repr)
        all_counts[key] += 1
        if e >= threshold:
            high_tokens.append((key, e))
    high_counts: Counter[str] = Counter(t for t, _ in high_tokens)
    high_sum: dict[str, float] = defaultdict(float)
    for t, e in high_tokens:
        high_sum[t] += e
    forking = [
        {"token": t, "count": c, "share_high": c / all_counts[t], "mean_entropy": high_sum[t] / c}
        for t, c in high_counts.most_common(top)
    ]
    top_edge = max_nats if max_nats is not None else (s[-1] if s else 1.0) or 1.0
    edges = [top_edge * i / bins for i in range(bins + 1)]
    counts = [0.0] * bins
    for v in values:
        counts[min(bins - 1, int(v / top_edge * bins)) if top_edge > 0 else 0] += 1
    mean = sum(values) / len(values) if values else float("nan")
    return LabelStats(
        label=label,
        trajectories=len(rows),
        tokens=len(values),
        mean=mean,
        quantiles={f"p{int(q * 100)}": _quantile(s, q) for q in (0.5, 0.8, 0.9, 0.95, 0.99)},
        high_threshold=threshold,
        histogram={"edges": edges, "counts": counts},
        forking=forking,
        post_tool={
            "first_k": first_k,
            "n_post": len(post),
            "n_other": len(other),
            "mean_post": sum(post) / len(post) if post else None,
            "mean_other": sum(other) / len(other) if other else None,
            "high_share_post": sum(v >= threshold for v in post) / len(post) if post else None,
            "high_share_other": sum(v >= threshold for v in other) / len(other) if other else None,
        },
    )


def entropy_report(
    run_dir: str | Path, labels: Sequence[str] | None = None, *, first_k: int = 10, top: int = 30
) -> dict[str, Any]:
    """Statistics of the run's entropy files (all labels, or the given ones), on a shared histogram range.

    Only trajectories scored under every reported label are used, so labels compare the same tokens.

    Raises:
        FileNotFoundError: the run has no entropy file (run :func:`score_run` first) or a label is missing.
    """
    run = read_run(run_dir)
    files = read_entropy(run.root)
    labels = list(labels) if labels else sorted(files)
    missing = [lab for lab in labels if lab not in files]
    if not labels or missing:
        raise FileNotFoundError(
            f"no entropy file for {missing or 'any model'} in {run.root / ENTROPY_DIR}; "
            "run `tirl analyze entropy RUN_DIR --model PATH` first"
        )
    common = set.intersection(*(set(files[lab]) for lab in labels))
    masks = {rid: rec["loss_mask"] for rid, rec in iter_token_records(run)}
    top_val = max(
        (e for lab in labels for rid in common for e in files[lab][rid].get("entropy") or [] if e is not None),
        default=1.0,
    )
    stats = [
        label_stats(
            lab, (files[lab][rid] for rid in sorted(common)), masks, first_k=first_k, top=top, max_nats=top_val
        ).to_dict()
        for lab in labels
    ]
    return {
        "run": str(run.root),
        "kind": run.kind,
        "trajectories": len(common),
        "high_quantile": HIGH_QUANTILE,
        "labels": stats,
    }


__all__ = [
    "HIGH_QUANTILE",
    "LabelStats",
    "entropy_report",
    "label_for",
    "label_stats",
    "post_tool_positions",
    "score_run",
    "token_entropies",
]
