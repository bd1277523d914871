"""Rejection-sampling SFT: ``trajectories:PATH`` sources (a ``tirl eval`` run's correct trajectories) are trained on
their exact sampled tokens; wrong, unanswered, duplicate and over-the-cap trajectories are left out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tirl.data.sft import load_sft_examples, load_sft_set, render_sft_example, trajectory_examples
from tirl.protocol import ProtocolConfig

SHORT = ProtocolConfig(
    system_prompt="Solve it.", function_description="Run Python.", code_description="Code.", input_description="Stdin."
)


def _record(problem_id: str, sample: int, response: list[int], *, correct=True, finish="answer", tools=("ok",)):
    return {
        "benchmark": "train.jsonl",
        "problem_id": problem_id,
        "sample_index": sample,
        "problem": f"problem {problem_id}",
        "correct": correct,
        "finish_reason": finish,
        "final_answer": "5",
        "tool_classes": list(tools),
        "prompt_ids": [1, 2, 3],
        "response_ids": response,
        "loss_mask": [1] * (len(response) - 1) + [0] if len(response) > 1 else [1],
    }


def _write(path: Path, records: list[dict]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_only_correct_answered_distinct_trajectories_are_kept_with_their_exact_tokens(tmp_path):
    run = _write(
        tmp_path / "eval",
        [
            _record("a", 0, [10, 11, 12]),
            _record("a", 1, [10, 11, 12]),  # the same response again: once is enough
            _record("a", 2, [13, 14]),
            _record("a", 3, [15, 16], correct=False),  # wrong
            _record("b", 0, [17, 18], finish="length"),  # truncated, even if graded correct
            _record("b", 1, [19, 20], tools=()),  # correct without the tool: a chat example
            _record("c", 0, [21, 22], correct=False),
        ],
    )
    examples = trajectory_examples(run)
    assert [e.id for e in examples] == ["train.jsonl/a#0", "train.jsonl/a#2", "train.jsonl/b#1"]
    assert [e.kind for e in examples] == ["tool", "tool", "chat"]
    first = examples[0].rendered
    assert first.prompt_ids == [1, 2, 3] and first.response_ids == [10, 11, 12] and first.loss_mask == [1, 1, 0]
    # the file itself or its folder; at most one per problem, the lowest sample index first
    capped = trajectory_examples(run / "trajectories.jsonl", max_per_problem=1)
    assert [e.id for e in capped] == ["train.jsonl/a#0", "train.jsonl/b#1"]
    # through the source list, mixed with a packaged set, and rendered unchanged
    mixed = load_sft_examples([f"trajectories:{run}", "gsm8k_tir:2"], shuffle=False, max_per_problem=1, config=SHORT)
    assert len(mixed) == 4 and mixed[0].rendered is not None
    assert render_sft_example(None, mixed[0]) is mixed[0].rendered


def test_bad_trajectory_files_are_one_line_errors(tmp_path):
    with pytest.raises(ValueError, match="no trajectories.jsonl"):
        trajectory_examples(tmp_path / "missing")
    no_tokens = _record("a", 0, [1, 2])
    del no_tokens["prompt_ids"]
    with pytest.raises(ValueError, match="re-run the evaluation"):
        trajectory_examples(_write(tmp_path / "old", [no_tokens]))
    bad_mask = _record("a", 0, [1, 2])
    bad_mask["loss_mask"] = [1]
    with pytest.raises(ValueError, match="does not fit"):
        trajectory_examples(_write(tmp_path / "mask", [bad_mask]))
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "trajectories.jsonl").write_text("{not json\n")
    with pytest.raises(ValueError, match=r"trajectories.jsonl:1: not JSON"):
        trajectory_examples(tmp_path / "junk")


@pytest.mark.slow
def test_the_trainer_receives_the_sampled_tokens_and_masks_the_injected_ones(tmp_path, tiny_model_dir):
    """Trajectories whose tokens a real rendering produced (as the agent loop does) reach TRL unchanged: input ids
    = prompt + response, labels -100 on the prompt and on loss-mask-0 tokens."""
    from transformers import AutoTokenizer

    from tirl.train.sft import build_sft_trainer
    from tirl.train.sft_config import load_sft_config

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    records = []
    for i, ex in enumerate(load_sft_set("gsm8k_tir", slice(0, 2), SHORT)):
        r = render_sft_example(tok, ex, SHORT)
        records.append(
            {
                **_record(ex.id, 0, r.response_ids),
                "prompt_ids": r.prompt_ids,
                "loss_mask": r.loss_mask,
                "problem_id": f"p{i}",
            }
        )
    run = _write(tmp_path / "eval", records)
    cfg = load_sft_config(
        None,
        [
            f"output_dir={tmp_path / 'sft'}",
            f"model.name_or_path={tiny_model_dir}",
            "model.dtype=float32",
            "model.lora.enabled=false",
            f"data.sources=[trajectories:{run}]",
            "optim.max_steps=1",
            "optim.batch_size=2",
            "optim.per_device_train_batch_size=2",
            "save_steps=100",
            "logging.console=false",
        ],
    )
    built = build_sft_trainer(cfg)
    assert built.stats.examples == 2 and built.stats.by_kind == {"tool": 2}
    for rec, row in zip(records, built.trainer.train_dataset):
        ids = rec["prompt_ids"] + rec["response_ids"]
        mask = [0] * len(rec["prompt_ids"]) + rec["loss_mask"]
        assert row["input_ids"] == ids
        assert row["labels"] == [t if m else -100 for t, m in zip(ids, mask)]
