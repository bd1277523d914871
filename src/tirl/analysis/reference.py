"""Reference tool-integrated trajectories: packaged SFT conversations written as an eval-schema run folder.

A model that never calls the tool (the packaged base model) leaves no "first tokens after a tool response" to
measure. The packaged SFT set ``gsm8k_tir`` holds worked solutions that call the Python tool and read its
output (:mod:`tirl.data.sft`, provenance in ``tirl/data/sft_files/PROVENANCE.md``). This module renders them
with a model's tokenizer exactly as the agent loop would (:func:`tirl.data.sft.render_sft_example`: prompt,
``<reason>`` prefill and tool-response segments masked 0) and writes them as ``RUN_DIR/trajectories.jsonl`` in
the schema of ``tirl eval``, so ``tirl view`` shows them and ``tirl analyze entropy`` re-scores them
**teacher-forced**: the entropy a model has on someone else's solution, not on its own samples.

Each record is marked ``"reference": true`` with verdict status ``reference``; tool calls are parsed back from
the turn text (class ``ok``, no execution result: the output is the reference's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tirl.data.sft import load_sft_examples, render_sft_example
from tirl.protocol import parse_tool_calls
from tirl.protocol.types import ToolCall
from tirl.runs.layout import eval_trajectories


def write_reference_run(out_dir: str | Path, source: str, tokenizer: Any, *, config: Any = None) -> Path:
    """Write the examples of ``source`` (``gsm8k_tir:0-20``, see :func:`tirl.data.sft.load_sft_examples`) as a run.

    Returns:
        The path of the written ``trajectories.jsonl`` (replaced when it exists).

    Raises:
        ValueError: an unknown source or a malformed range.
    """
    examples = load_sft_examples([source], shuffle=False, config=config)
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = eval_trajectories(folder)
    tmp = path.with_suffix(".jsonl.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for ex in examples:
            rendered = render_sft_example(tokenizer, ex, config)
            runs = _model_runs(rendered.loss_mask)  # one run of model tokens per assistant turn
            turns = []
            for n_turn, turn in enumerate(ex.turns):
                calls = parse_tool_calls(turn.text, config)
                records = []
                for k, response in enumerate(turn.tool_responses):
                    call = calls[k] if k < len(calls) else None
                    records.append(
                        {
                            "call": {"name": call.name, "arguments": call.arguments, "raw": call.raw}
                            if isinstance(call, ToolCall)
                            else {"kind": "reference", "message": "", "raw": ""},
                            "result": None,
                            "cls": "ok",
                            "response_text": response,
                        }
                    )
                turns.append(
                    {
                        "text": turn.text,
                        "tool_calls": records,
                        "finish_reason": "stop",
                        "num_tokens": runs[n_turn] if n_turn < len(runs) else None,
                    }
                )
            fh.write(
                json.dumps(
                    {
                        "benchmark": f"reference:{source.partition(':')[0]}",
                        "problem_id": ex.id,
                        "sample_index": 0,
                        "reference": True,
                        "problem": ex.problem,
                        "gold": ex.answer,
                        "final_answer": ex.answer,
                        "correct": True,
                        "verdict": {"correct": True, "status": "reference"},
                        "finish_reason": "answer",
                        "num_turns": len(turns),
                        "num_prompt_tokens": len(rendered.prompt_ids),
                        "num_response_tokens": len(rendered.response_ids),
                        "model_tokens": sum(rendered.loss_mask),
                        "tool_classes": ["ok" for t in turns for _ in t["tool_calls"]],
                        "turns": turns,
                        "prompt_text": tokenizer.decode(rendered.prompt_ids, skip_special_tokens=False),
                        "prompt_ids": list(rendered.prompt_ids),
                        "response_ids": list(rendered.response_ids),
                        "loss_mask": list(rendered.loss_mask),
                    },
                    ensure_ascii=False,
                )
                + "\n"
            )
    tmp.replace(path)
    return path


def _model_runs(mask: list[int]) -> list[int]:
    """Lengths of the runs of 1s in a loss mask, in order (``[1, 1, 0, 1] -> [2, 1]``)."""
    out: list[int] = []
    prev = 0
    for m in mask:
        if m and not prev:
            out.append(0)
        if m:
            out[-1] += 1
        prev = m
    return out


__all__ = ["write_reference_run"]
