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


# ------------------------------------------------------------------------------------ trajectory_tokens: rerender

PROBLEM = "Natalia sold 48 clips in April and half as many in May. How many clips did she sell altogether?"
UNTAGGED = '{"name": "execute_python_code_with_standard_io", "arguments": {"code": "print(48 + 24)", "input": ""}}'
# what an evaluation sampled with: native style, an instruction of its own, untagged calls read (lenient)
SAMPLING = ProtocolConfig(
    prompt_style="native", lenient=True, baseline_instruction="Call the Python tool, then box the answer."
)
# what the SFT recipe trains in: native style, Qwen's own sentence, strict parsing
SFT_NATIVE = ProtocolConfig(prompt_style="native")


async def _sampled_record(tok, turns, protocol=SAMPLING, **keys):
    """A ``trajectories.jsonl`` line as ``tirl eval`` writes it, for a scripted model."""
    from test_agent_loop import ScriptedEngine, ScriptedExecutor, stop_of
    from tirl.eval.runner import trajectory_record
    from tirl.rollout.agent_loop import AgentLoop, AgentLoopConfig, RolloutRequest
    from tirl.rollout.engine import SingleEngineRouter

    engine = ScriptedEngine(tok, turns, stop_of(tok))
    config = AgentLoopConfig(max_response_tokens=4000, protocol=protocol)
    loop = AgentLoop(SingleEngineRouter(engine), ScriptedExecutor(), tok, config)
    traj = await loop.run_one(RolloutRequest(PROBLEM))
    verdict = {"correct": traj.final_answer == "72"}
    response_text = tok.decode(traj.response_ids, skip_special_tokens=False)
    base = {"benchmark": "gsm8k", "problem_id": "p0", "sample_index": 0, "problem": PROBLEM, **keys}
    return json.loads(json.dumps(trajectory_record(traj, tok, verdict, response_text, **base)))


async def test_rerender_writes_untagged_calls_tagged_in_the_sft_prompt_and_masks_the_responses(
    tmp_path, qwen_tokenizer
):
    from tirl.protocol.parse import render_tool_call
    from tirl.protocol.render import render_prompt_ids, tool_response_segment_ids

    tok = qwen_tokenizer
    t1 = "Half of 48 is 24.\n```json\n" + UNTAGGED + "\n```"
    t2 = "She sold \\boxed{72} clips."
    record = await _sampled_record(tok, [t1, t2])
    assert record["correct"] and record["turns"][0]["tool_calls"][0]["call"]["repairs"] == ["untagged", "code_fence"]
    run = _write(tmp_path / "eval", [record])

    [example] = trajectory_examples(run, tokens="rerender", config=SFT_NATIVE)
    canonical = render_tool_call("print(48 + 24)", "", SFT_NATIVE)
    assert example.rendered is None and example.kind == "tool" and example.answer == "72"
    assert example.id == "gsm8k/p0#0"
    assert [t.text for t in example.turns] == ["Half of 48 is 24.\n" + canonical, t2]  # no fence, no <|im_end|>
    assert example.turns[0].tool_responses == ["72"] and example.turns[1].tool_responses == []

    rendered = render_sft_example(tok, example, SFT_NATIVE)
    # the prompt is the SFT protocol's (Qwen's sentence), not the sampling instruction
    assert rendered.prompt_ids == render_prompt_ids(tok, PROBLEM, SFT_NATIVE)
    assert rendered.prompt_ids != record["prompt_ids"]
    assert "Call the Python tool" not in tok.decode(rendered.prompt_ids)
    stop = tok.convert_tokens_to_ids("<|im_end|>")
    ids1 = tok.encode("Half of 48 is 24.\n" + canonical, add_special_tokens=False) + [stop]
    segment = tool_response_segment_ids(tok, ["72"], SFT_NATIVE)
    ids2 = tok.encode(t2, add_special_tokens=False) + [stop]
    assert rendered.response_ids == ids1 + segment + ids2
    assert rendered.loss_mask == [1] * len(ids1) + [0] * len(segment) + [1] * len(ids2)
    assert "<tool_call>\n" + json.dumps(
        {"name": SFT_NATIVE.function_name, "arguments": {"code": "print(48 + 24)", "input": ""}}
    ) in tok.decode(ids1)
    assert "<tool_response>\n72\n</tool_response>" in tok.decode(segment)

    # exact mode is unchanged: the sampled tokens, the sampling prompt and the untagged call
    [exact] = trajectory_examples(run)
    assert exact.rendered.prompt_ids == record["prompt_ids"] and exact.rendered.response_ids == record["response_ids"]
    assert exact.rendered.loss_mask == record["loss_mask"]
    # through the source list with the setting
    [loaded] = load_sft_examples(
        [f"trajectories:{run}"], shuffle=False, config=SFT_NATIVE, trajectory_tokens="rerender"
    )
    assert loaded.turns == example.turns


async def test_rerender_skips_and_counts_what_it_cannot_render_faithfully(tmp_path, qwen_tokenizer):
    import collections

    from tirl.protocol.parse import render_tool_call

    tok = qwen_tokenizer
    t2 = "So \\boxed{72}."
    good = await _sampled_record(tok, [render_tool_call("print(48 + 24)"), t2], problem_id="good")
    # a parse error on the way (the trajectory still ended correct)
    broken = await _sampled_record(tok, ["<tool_call>{oops</tool_call>", t2], problem_id="broken")
    # sampled in cot (no tool): a call written in the final turn never ran, but would be a call in the SFT protocol
    cot = await _sampled_record(
        tok, [render_tool_call("print(72)") + "\nSo \\boxed{72}."], ProtocolConfig(prompt_style="cot"), problem_id="cot"
    )
    changed = json.loads(json.dumps(good))  # the recorded answer is not what the turns give
    changed["problem_id"], changed["final_answer"] = "answer", "73"
    wrong_span = json.loads(json.dumps(good))
    wrong_span["problem_id"] = "span"
    wrong_span["turns"][0]["tool_calls"][0]["call"]["span"] = [5, 10_000]
    run = _write(tmp_path / "eval", [good, broken, cot, changed, wrong_span])
    skipped: collections.Counter[str] = collections.Counter()
    examples = trajectory_examples(run, tokens="rerender", config=SFT_NATIVE, skipped=skipped)
    assert [e.id for e in examples] == ["gsm8k/good#0"]
    assert skipped == {"parse_error": 1, "calls_changed": 1, "answer_changed": 1, "bad_span": 1}
    # exact mode keeps every correct answered one, as before
    assert len(trajectory_examples(run)) == 5
    with pytest.raises(ValueError, match="trajectory_tokens"):
        trajectory_examples(run, tokens="tokens")


def test_the_setting_is_read_from_a_recipe_and_checked():
    from tirl.train.sft_config import load_sft_config

    assert load_sft_config(None, []).data.trajectory_tokens == "exact"
    assert load_sft_config(None, ["data.trajectory_tokens=rerender"]).data.trajectory_tokens == "rerender"
    with pytest.raises(ValueError):
        load_sft_config(None, ["data.trajectory_tokens=retokenize"])
