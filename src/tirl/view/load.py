"""Reading a run folder into the viewer's records: one compact dict per trajectory, eval and training alike.

Covers the two kinds of run tirl writes:

- an **evaluation run** (``tirl eval``/``tirl demo``): ``RUN_DIR/trajectories.jsonl`` (schema:
  :func:`tirl.eval.runner.trajectory_record`), optionally ``summary.json``;
- a **training run** with ``logging.log_trajectories``: ``RUN_DIR/trajectories/step_NNNNN_rankR.jsonl``
  (schema: :meth:`tirl.train.rollout_func.RocRolloutFunc._log_trajectories`); ``RUN_DIR`` may also be that
  ``trajectories`` folder itself.

and the per-token entropies written by ``tirl analyze entropy`` (``RUN_DIR/entropy/<label>.jsonl``, see
:mod:`tirl.analysis.entropy`), matched to trajectories by :func:`record_id`.

Malformed lines are skipped and counted, never fatal; records of older tirl versions (no token ids, training
logs with only ``tool_responses`` per turn) are read with what they have. It does not render anything
(:mod:`tirl.view.render`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tirl.runs.evals import read_samples, read_summary
from tirl.runs.layout import ENTROPY_DIR, EVAL_TRAJECTORIES, TRAJECTORY_DIR, is_eval_run
from tirl.runs.trajectories import read_jsonl, training_records


@dataclass
class RunRecords:
    """The raw records of one run folder.

    Attributes:
        kind: ``eval`` or ``train``.
        root: the run folder (for a training run, the folder holding ``trajectories/``).
        records: the parsed JSON objects, in file order (training: by step, then rank, then line).
        skipped_lines: lines that were not JSON objects.
        summary: ``summary.json`` of an eval run, when present.
    """

    kind: str
    root: Path
    records: list[dict[str, Any]] = field(default_factory=list)
    skipped_lines: int = 0
    summary: dict[str, Any] | None = None


def read_run(run_dir: str | Path) -> RunRecords:
    """Read every trajectory record of an eval or training run folder (through :mod:`tirl.runs`).

    Raises:
        FileNotFoundError: the folder holds neither ``trajectories.jsonl`` nor ``trajectories/step_*.jsonl``.
    """
    root = Path(run_dir)
    if is_eval_run(root):
        rows, skipped = read_samples(root)
        return RunRecords("eval", root, rows, skipped, read_summary(root))
    found = training_records(root)
    if found is None:
        runs = sorted(p.parent.name for p in root.glob(f"*/{EVAL_TRAJECTORIES}")) if root.is_dir() else []
        hint = f"; it holds runs in {', '.join(runs)}: view one of them (e.g. {root / runs[0]})" if runs else ""
        raise FileNotFoundError(
            f"{root} holds no trajectories: expected {EVAL_TRAJECTORIES} (tirl eval) or "
            f"{TRAJECTORY_DIR}/step_N_rankR.jsonl (tirl train rl with logging.log_trajectories=true)"
            f"{hint}"
        )
    return RunRecords("train", found.root, found.records, found.skipped_lines)


def record_id(kind: str, record: dict[str, Any]) -> str:
    """A stable id of one trajectory within its run (used to join entropy files to trajectories).

    Eval: ``benchmark/problem_id#sample_index``; training: ``sSTEP/rRANK/problem_id#sample`` (plus the line
    number when a step's file holds the same problem twice).
    """
    if kind == "eval":
        return f"{record.get('benchmark', '')}/{record.get('problem_id', '')}#{record.get('sample_index', 0)}"
    base = f"s{record.get('step', 0)}/r{record.get('rank', 0)}/{record.get('problem_id', '')}#{record.get('sample', 0)}"
    group = record.get("group")
    return base if group is None else f"{base}/g{group}"


def iter_token_records(run: RunRecords) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(record_id, record)`` for every record with a usable ``prompt_ids`` (non-empty), ``response_ids`` and
    ``loss_mask`` (lists of non-negative ints, the mask of 0/1 as long as the response); others are skipped."""

    def ints(x: Any) -> bool:
        return isinstance(x, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in x)

    for rec in run.records:
        ids, mask = rec.get("response_ids"), rec.get("loss_mask")
        if (
            ints(rec.get("prompt_ids"))
            and rec["prompt_ids"]
            and ints(ids)
            and ints(mask)
            and len(ids) == len(mask)
            and all(m in (0, 1) for m in mask)
        ):
            yield record_id(run.kind, rec), rec


def read_entropy(root: str | Path) -> dict[str, dict[str, dict[str, Any]]]:
    """The entropy files of a run: ``{label: {record_id: row}}`` (empty when ``entropy/`` does not exist)."""
    folder = Path(root) / ENTROPY_DIR
    out: dict[str, dict[str, dict[str, Any]]] = {}
    if not folder.is_dir():
        return out
    for path in sorted(folder.glob("*.jsonl")):
        rows, _ = read_jsonl(path)
        out[path.stem] = {str(r.get("id")): r for r in rows if "id" in r}
    return out


__all__ = ["ENTROPY_DIR", "RunRecords", "iter_token_records", "read_entropy", "read_run", "record_id"]
