"""Run folders for the viewer and entropy tests, written by tirl's own writers (not hand-made JSON).

An eval run: records from :func:`tirl.eval.runner.trajectory_record` over real :class:`Trajectory` objects with
every tool-call class. A training run: files written by :class:`tirl.train.rollout_func.RocRolloutFunc` with
``logging.log_trajectories`` (RoC decides what is kept).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tirl.data.problem import Problem
from tirl.eval.runner import trajectory_record
from tirl.protocol import ToolCall, ToolCallRecord, Trajectory, TurnRecord
from tirl.protocol.types import ToolCallError
from tirl.reward.scorer import Score
from tirl.sandbox import ExecutionResult
from tirl.train.config import load_config
from tirl.train.rollout_func import RocRolloutFunc

HOSTILE = '</script><img src=x onerror="window.__pwned=1"><b>bold?</b>'
CLASSES = ("ok", "error", "timeout", "parse_error")


class CharTokenizer:
    """Decodes ids as characters (chr(id)); enough for ``trajectory_record``'s prompt text."""

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(chr(max(32, i)) for i in ids)


def _record_for(cls: str, k: int) -> ToolCallRecord:
    if cls == "parse_error":
        return ToolCallRecord(
            call=ToolCallError(kind="invalid_json", message="not JSON", raw="{print(1)"),
            result=None,
            cls="parse_error",
            response_text="Error: the tool call was not valid JSON",
        )
    status = {"ok": "ok", "error": "error", "timeout": "timeout"}[cls]
    result = ExecutionResult(
        status=status,
        stdout=f"out-{k}\n" if cls == "ok" else "",
        traceback="ZeroDivisionError: division by zero" if cls == "error" else None,
        exit_code=0 if cls == "ok" else 1,
        duration_s=0.25 + k,
    )
    code = f"def f():\n    return {k} / 1\nprint(f())"
    return ToolCallRecord(
        call=ToolCall(name="execute_python_code_with_standard_io", arguments={"code": code, "input": "7\n"}),
        result=result,
        cls=cls,
        response_text=f"<tool_response>\nresponse-{k}\n</tool_response>",
    )


def trajectory(k: int, *, with_tool: bool = True, truncated: bool = False) -> Trajectory:
    """Trajectory number ``k``: a tool turn (class ``CLASSES[k % 4]``) then an answer turn, with a tool segment."""
    cls = CLASSES[k % len(CLASSES)]
    model1, tool, model2 = [30 + (k + j) % 50 for j in range(6)], [5, 6, 7, 8], [40 + (k + j) % 40 for j in range(5)]
    if not with_tool:
        tool = []
    ids = model1 + tool + model2
    mask = [1] * len(model1) + [0] * len(tool) + [1] * len(model2)
    turns = [
        TurnRecord(
            text=f"turn one of {k}: let me compute",
            num_tokens=len(model1),
            tool_calls=[_record_for(cls, k)] if with_tool else [],
        ),
        TurnRecord(
            text=f"so the answer is \\boxed{{{k}}} needle-{k}",
            num_tokens=len(model2),
            answer_blocks=1,
            finish_reason="length" if truncated else "stop",
        ),
    ]
    return Trajectory(
        prompt_ids=[1, 2, 3, 4],
        response_ids=ids,
        loss_mask=mask,
        turns=turns,
        final_answer=str(k),
        finish_reason="length" if truncated else "answer",
    )


def write_eval_run(folder: Path, n: int, *, hostile_at: int | None = 0) -> Path:
    """An eval run of ``n`` trajectories: every 2nd correct, every 5th truncated, tool classes in turn."""
    folder.mkdir(parents=True, exist_ok=True)
    tok = CharTokenizer()
    with open(folder / "trajectories.jsonl", "w", encoding="utf-8") as fh:
        for k in range(n):
            traj = trajectory(k, with_tool=(k % 7 != 6), truncated=(k % 5 == 4))
            verdict = {"correct": k % 2 == 0, "status": "ok"}
            problem = HOSTILE if k == hostile_at else f"problem number {k}"
            rec = trajectory_record(
                traj,
                tok,
                verdict,
                "response",
                benchmark="bench",
                problem_id=f"p{k // 2}",
                sample_index=k % 2,
                seed=k,
                problem=problem,
                gold=str(k),
            )
            fh.write(json.dumps(rec) + "\n")
    return folder


def write_train_run(folder: Path, steps: int = 2) -> Path:
    """A training run's ``trajectories/`` written by RoC's rollout function: 1 problem, 8 sampled, 4 kept."""
    problems = [Problem(id="q0", problem="problem 0", answer="0")]
    cfg = load_config(
        None,
        [
            "rollout.group_size=4",
            "rollout.oversample=2",
            "roc.min_per_class=1",
            "problems_per_step=1",
            "optim.per_device_train_batch_size=4",
            "logging.log_trajectories=true",
            f"output_dir={folder}",
        ],
    )

    class Source:
        def generate(self, probs: Any, n: int, *, seed: int, trainer: Any) -> list[Trajectory]:
            return [trajectory(k) for k in range(n)]

    class Scorer:
        def score(self, trajs: Any, probs: Any) -> list[Score]:
            return [Score(1.0 if t.final_answer in ("0", "2", "4") else 0.0) for t in trajs]

    fn = RocRolloutFunc(cfg, problems, Source(), Scorer(), pad_token_id=2)
    for step in range(steps):
        fn(
            ["problem 0"] * 4,
            SimpleNamespace(state=SimpleNamespace(global_step=step), accelerator=SimpleNamespace(process_index=0)),
        )
    return folder
