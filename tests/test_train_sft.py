"""The SFT stage: data conversion, the loss mask against an independent reconstruction, TRL's labels, training
steps on the tiny random model, the merged final folder in the agent loop, resume, and the CLI."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tirl.cli.main import app
from tirl.data.sft import (
    SFT_DATA_DIR,
    SFT_SETS,
    chat_example,
    gsm8k_tir_example,
    load_sft_examples,
    load_sft_set,
    render_sft_example,
)
from tirl.protocol import ProtocolConfig, ToolCall, extract_answer, parse_tool_calls
from tirl.protocol.answer import count_answer_blocks, format_penalty
from tirl.protocol.prompt import tool_schema
from tirl.protocol.render import conversation_messages, uses_tokenizer_template

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
# A short system prompt and tool descriptions keep the tiny model's sequences (and its 151,936-way logits) small.
SHORT = ProtocolConfig(
    system_prompt="Solve it.", function_description="Run Python.", code_description="Code.", input_description="Stdin."
)
# One conversation a step (one forward/backward over the 151,936-way logits instead of _config's two), where the
# checks do not depend on how many conversations a step averages (what moved, what was saved, resume; the loss
# test's drop at 1 a step is written beside it).
ONE_PER_STEP = "optim.batch_size=1"


@pytest.fixture(scope="module")
def gsm_rows():
    return load_sft_set("gsm8k_tir", slice(0, 6))


# ---------------------------------------------------------------------------------------------------------- data


def test_gsm8k_conversion_follows_the_protocol(gsm_rows):
    assert gsm_rows[0].id == "gsm8k-train-00000" and gsm_rows[0].answer == "72"
    for ex in gsm_rows:
        *calls, final = ex.turns
        assert calls and all(t.tool_responses for t in calls) and not final.tool_responses
        for turn in calls:  # every call parses, one tool response per call
            parsed = parse_tool_calls(turn.text)
            assert len(parsed) == len(turn.tool_responses) and all(isinstance(p, ToolCall) for p in parsed)
            assert "</reason>" not in turn.text and "<answer>" not in turn.text
        assert final.text.count("</reason>") == 1 and final.text.endswith("</answer>")
        assert extract_answer(final.text) == ex.answer
        blocks = sum(count_answer_blocks(t.text) for t in ex.turns)
        assert blocks == 1 and format_penalty(blocks, len(ex.turns)) == 0.0


def test_gsm8k_conversion_rejects_a_wrong_answer_and_a_dangling_call():
    row = {
        "id": "x",
        "problem": "1+1?",
        "answer": "3",
        "messages": [
            {"role": "user", "content": "1+1?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"type": "function", "function": {"name": "f", "arguments": {"code": "print(1+1)", "input": ""}}}
                ],
            },
            {"role": "tool", "content": "2"},
            {"role": "assistant", "content": "So 2.\nThe answer is $\\boxed{2}$."},
        ],
    }
    with pytest.raises(ValueError, match="answer"):
        gsm8k_tir_example(row)
    assert gsm8k_tir_example(dict(row, answer="2")).turns[-1].text.endswith("\\boxed{2}.</answer>")
    with pytest.raises(ValueError):
        gsm8k_tir_example(dict(row, messages=row["messages"][:3]))  # ends on a tool response


def test_chat_conversion_uses_the_first_exchange_inside_answer_tags():
    ex = chat_example(
        {
            "id": "c",
            "messages": [
                {"role": "user", "content": "Hi?"},
                {"role": "assistant", "content": " Hello. "},
                {"role": "user", "content": "More"},
                {"role": "assistant", "content": "Later"},
            ],
        }
    )
    assert ex.problem == "Hi?" and [t.text for t in ex.turns] == ["</reason> <answer>Hello.</answer>"]
    with pytest.raises(ValueError):
        chat_example({"id": "d", "messages": [{"role": "user", "content": "Hi?"}]})


def test_sources_ranges_and_errors():
    picked = load_sft_examples(["gsm8k_tir:5-8"], shuffle=False)
    with gzip.open(SFT_DATA_DIR / SFT_SETS["gsm8k_tir"]["file"], "rt") as fh:
        rows = [json.loads(line) for _, line in zip(range(8), fh)][5:8]
    assert [e.id for e in picked] == [r["id"] for r in rows]
    assert len(load_sft_examples(["oasst:3", "oasst:3"], shuffle=False)) == 3  # de-duplicated
    assert len(load_sft_set("oasst")) == 95
    with pytest.raises(ValueError, match="packaged"):
        load_sft_examples(["alpaca"])
    with pytest.raises(ValueError, match="START-STOP"):
        load_sft_examples(["oasst:a-b"])


# ------------------------------------------------------------------------------------------------ the loss mask


def _expected_mask(tokenizer, example, config=None):
    """Independent reconstruction: render the conversation with the tokenizer's own chat template
    (``apply_chat_template``), mark the characters the model wrote (each assistant message after the prefill,
    through its end-of-turn token) and map them onto the tokens by decoding each token on its own."""
    native = uses_tokenizer_template(tokenizer, config)
    messages = conversation_messages(example.problem, example.turns, config, native_tools=native)
    text = tokenizer.apply_chat_template(messages, tools=[tool_schema(config)] if native else None, tokenize=False)
    spans = [m.span(1) for m in re.finditer(r"<\|im_start\|>assistant\n<reason>(.*?<\|im_end\|>)", text, re.S)]
    assert len(spans) == len(example.turns)
    return text, spans


@pytest.mark.parametrize("tok_fixture", ["qwen_tokenizer", "smollm2_tokenizer"])
@pytest.mark.parametrize("which", ["tool", "chat"])
def test_loss_mask_is_one_exactly_on_model_tokens(request, tok_fixture, which, gsm_rows):
    tokenizer = request.getfixturevalue(tok_fixture)
    example = gsm_rows[0] if which == "tool" else load_sft_set("oasst", slice(0, 1))[0]
    rendered = render_sft_example(tokenizer, example)
    ids, mask = rendered.input_ids, rendered.labels_mask
    assert len(ids) == len(mask)
    text, spans = _expected_mask(tokenizer, example)
    pieces = [tokenizer.decode([i]) for i in ids]
    assert text.startswith("".join(pieces))  # the template adds "\n" after the last end-of-turn token
    expected, pos = [], 0
    for piece in pieces:
        start, end = pos, pos + len(piece)
        inside = [s <= start and end <= e for s, e in spans]
        straddles = [start < s < end or start < e < end for s, e in spans]
        assert not any(straddles), f"token {piece!r} crosses a model/injected boundary"
        expected.append(int(any(inside)))
        pos = end
    assert mask == expected
    # and spelled out: nothing injected is trained on, every turn's end-of-turn token is
    for piece, m in zip(pieces, mask):
        if piece in ("<|im_start|>", "<reason>", "<tool_response>", "</tool_response>", "system", "user"):
            assert m == 0, piece
    assert sum(1 for p, m in zip(pieces, mask) if p == "<|im_end|>" and m) == len(example.turns)
    runs = sum(1 for a, b in zip([0] + mask, mask) if a == 0 and b == 1)
    assert runs == len(example.turns)


# ---------------------------------------------------------------------------------------------- training (tiny)


def _config(tmp_path, model_dir, *overrides):
    from tirl.train.sft_config import load_sft_config

    return load_sft_config(
        None,
        [
            f"model.name_or_path={model_dir}",
            "model.dtype=float32",
            f"output_dir={tmp_path / 'run'}",
            "data.max_length=400",
            "optim.batch_size=2",
            "optim.per_device_train_batch_size=1",
            "optim.warmup_ratio=0",
            "optim.lr_scheduler_type=constant",
            "logging.console=false",
            *overrides,
        ],
    )


def _fixed_batch_loss(trainer):
    import torch

    model = trainer.model
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(trainer.train_dataset))])
    model.eval()
    with torch.no_grad():
        loss = model(**{k: v.to(model.device) for k, v in batch.items()}).loss.item()
    model.train()
    return loss


# A LoRA adapter with the call-tag rows trained too (model.train_token_rows), one conversation a step at 1e-4 with a
# checkpoint every step: the shared run below and the tests that continue it or vary one setting of it.
ROWS = ["model.lora.enabled=true", "model.lora.r=4", "model.train_token_rows=[<tool_call>, </tool_call>]"]
ROWS_RUN = [*ROWS, ONE_PER_STEP, "optim.learning_rate=1e-4", "save_steps=1"]


@pytest.fixture(scope="module")
def rows_run(tmp_path_factory, tiny_model_dir):
    """One step of ``ROWS_RUN`` on the tiny model and one conversation, trained once for the tests that read such a
    run (the merged final folder, the checkpoint, the trainer's optimizer and rows): (the built SFT after its step,
    the final folder ``RUN/final``, whose parent ``RUN`` holds ``checkpoint-1``). Never written into: a test that
    continues the run copies ``RUN`` first (:func:`_copy_run`). What :func:`tirl.train.sft.train_sft` does, with
    the trainer kept."""
    from tirl.runs.layout import final_dir
    from tirl.train.sft import build_sft_trainer, save_final

    cfg = _config(tmp_path_factory.mktemp("rows-run"), tiny_model_dir, *ROWS_RUN, "optim.max_steps=1")
    built = build_sft_trainer(cfg, examples=load_sft_set("gsm8k_tir", slice(0, 1), SHORT), protocol=SHORT)
    built.trainer.train()
    final = save_final(built.trainer, built.tokenizer, final_dir(cfg.output_dir), merge_lora=cfg.merge_lora)
    return built, final


def _copy_run(run: Path, tmp_path: Path) -> Path:
    """``run`` (its checkpoints and metrics, not ``final``) copied to ``tmp_path/run``; returns ``tmp_path``, the
    folder to give :func:`_config`."""
    shutil.copytree(run, tmp_path / "run", ignore=lambda d, names: ["final"] if Path(d) == run else [])
    return tmp_path


@pytest.mark.slow(seconds=60)
def test_sft_steps_lower_the_loss_change_the_weights_and_trl_masks_labels(tmp_path, tiny_model_dir, gsm_rows):
    import torch

    from tirl.train.sft import build_sft_trainer

    examples = [load_sft_set("gsm8k_tir", slice(0, 2), SHORT)[i] for i in range(2)]
    # 2 steps of 1 conversation at 6e-3: every step's backward is over 151,936-way logits on CPU. The loss on the
    # fixed batch of both conversations falls 12.17 -> 10.69 (2 steps of both: 10.53; with lr 0 it stays 12.17)
    cfg = _config(
        tmp_path, tiny_model_dir, ONE_PER_STEP, "optim.max_steps=2", "optim.learning_rate=6e-3", "save_steps=100"
    )
    built = build_sft_trainer(cfg, examples=examples, protocol=SHORT)
    trainer = built.trainer
    # TRL turned the mask into labels: -100 exactly where the mask is 0, the token id elsewhere
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    for ex, row in zip(examples, trainer.train_dataset):
        r = render_sft_example(tok, ex, SHORT)
        assert row["input_ids"] == r.input_ids
        assert row["labels"] == [i if m else -100 for i, m in zip(r.input_ids, r.labels_mask)]
    before_params = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    before = _fixed_batch_loss(trainer)
    trainer.train()
    after = _fixed_batch_loss(trainer)
    assert trainer.state.global_step == 2
    assert after < before - 0.5, (before, after)
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(p.detach(), before_params[n])]
    assert changed and any("lm_head" in n or "embed" in n for n in changed)


@pytest.mark.slow
def test_lora_final_folder_is_merged_loads_runs_in_the_agent_loop_and_resumes(tmp_path, tiny_model_dir, rows_run):
    import torch

    from tirl.models import generation_eos_ids, load
    from tirl.rollout.agent_loop import AgentLoop, AgentLoopConfig, RolloutRequest
    from tirl.rollout.engine import SingleEngineRouter
    from tirl.rollout.hf_engine import HFEngine, HFEngineConfig
    from tirl.runs.metrics import read_metrics
    from tirl.sandbox.types import ExecutionResult
    from tirl.train.sft import build_sft_trainer

    examples = load_sft_set("gsm8k_tir", slice(0, 1), SHORT)
    _, final = rows_run
    assert (final / "config.json").is_file() and not (final / "adapter_config.json").exists()
    model, tok = load(final, dtype="float32")
    base, _ = load(tiny_model_dir, dtype="float32")
    assert generation_eos_ids(tok) == generation_eos_ids(str(tiny_model_dir))
    base_sd = base.state_dict()
    moved = [k for k, v in model.state_dict().items() if not torch.equal(v, base_sd[k])]
    # the adapter was merged: the adapted projections moved (the run trains the call-tag rows, embeddings, too)
    assert any(k.endswith("_proj.weight") for k in moved), moved
    assert not any("lora" in k for k in model.state_dict())

    class OkExecutor:
        async def run(self, request):
            return ExecutionResult(status="ok", stdout="1\n")

        async def run_batch(self, requests):
            return [ExecutionResult(status="ok", stdout="1\n") for _ in requests]

        async def aclose(self):
            pass

    loop = AgentLoop(
        SingleEngineRouter(HFEngine(model, HFEngineConfig(seed=0))),
        OkExecutor(),
        tok,
        AgentLoopConfig(max_response_tokens=16, max_turns=2, temperature=1.0),
    )
    [traj] = asyncio.run(loop.run_many([RolloutRequest("What is 1 + 1?", sample_index=0, seed=0)]))
    assert traj.finish_reason != "error" and 0 < len(traj.response_ids) <= 16

    # resume: the same run (a copy) with one step more continues from checkpoint-1, and no step is logged twice
    more = _config(_copy_run(final.parent, tmp_path), tiny_model_dir, *ROWS_RUN, "optim.max_steps=2")
    built = build_sft_trainer(more, examples=examples, protocol=SHORT)
    assert built.resume_from is not None and built.resume_from.name == "checkpoint-1"
    built.trainer.train(resume_from_checkpoint=str(built.resume_from))
    assert built.trainer.state.global_step == 2
    steps = [r["step"] for r in read_metrics(tmp_path / "run") if "loss" in r]
    assert steps == [1, 2]
    assert all(r.get("tirl/time/step_s", 0) > 0 for r in read_metrics(tmp_path / "run") if "loss" in r)


def test_init_token_rows_reach_the_merged_final_model(tmp_path, tiny_model_dir):
    """The SFT recipe's model.init_token_rows: the call-tag rows of the final (LoRA-merged) folder are the
    spelling means set at load time, other rows are the base model's."""
    import torch

    from tirl.models import load
    from tirl.models.token_rows import spelling_ids
    from tirl.train.sft import train_sft

    examples = load_sft_set("gsm8k_tir", slice(0, 1), SHORT)
    cfg = _config(
        tmp_path,
        tiny_model_dir,
        ONE_PER_STEP,
        "optim.max_steps=1",
        "save_steps=100",
        "model.lora.enabled=true",
        "model.lora.r=4",
        "model.init_token_rows=[<tool_call>, </tool_call>]",
    )
    final = train_sft(cfg, examples=examples, protocol=SHORT)
    base, tok = load(tiny_model_dir, dtype="float32")
    model, _ = load(final, dtype="float32")
    vocab = tok.get_vocab()
    before, after = base.get_input_embeddings().weight, model.get_input_embeddings().weight
    for tag in ("<tool_call>", "</tool_call>"):
        expected = before[spelling_ids(tok, tag)].mean(dim=0)
        assert torch.allclose(after[vocab[tag]], expected, atol=1e-6), tag
    assert not torch.allclose(after[vocab["<tool_call>"]], after[vocab["</tool_call>"]])
    assert torch.equal(before[vocab["<|box_start|>"]], after[vocab["<|box_start|>"]])


@pytest.fixture(scope="module")
def untied_model_dir(tmp_path_factory, tiny_model_dir):
    """The tiny model with an LM head of its own (a copy of the embedding, ``tie_word_embeddings`` false), once
    for the module's untied cases."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path_factory.mktemp("untied")

    m = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    m.config.tie_word_embeddings = False
    m.lm_head.weight = torch.nn.Parameter(m.get_input_embeddings().weight.detach().clone())
    m.save_pretrained(str(out))
    AutoTokenizer.from_pretrained(str(tiny_model_dir)).save_pretrained(str(out))
    return out


@pytest.mark.parametrize("tied", [True, False])
def test_train_token_rows_move_only_those_rows_and_survive_checkpoints(request, tmp_path, tiny_model_dir, tied):
    import torch

    from tirl.models import load
    from tirl.train.sft import build_sft_trainer, train_sft
    from tirl.train.token_rows import ROWS_FILE

    examples = load_sft_set("gsm8k_tir", slice(0, 1), SHORT)
    if tied:  # the module's run of these settings
        model_dir, (_, final) = tiny_model_dir, request.getfixturevalue("rows_run")
    else:
        model_dir = request.getfixturevalue("untied_model_dir")
        cfg = _config(tmp_path / "untied-run", model_dir, *ROWS_RUN, "optim.max_steps=1")
        final = train_sft(cfg, examples=examples, protocol=SHORT)
    base, tok = load(model_dir, dtype="float32")
    model, _ = load(final, dtype="float32")
    vocab = tok.get_vocab()
    tags = [vocab["<tool_call>"], vocab["</tool_call>"]]
    others = [i for i in range(base.get_input_embeddings().weight.shape[0]) if i not in tags]
    for get in ("get_input_embeddings", "get_output_embeddings"):
        before, after = getattr(base, get)().weight, getattr(model, get)().weight
        assert all(not torch.equal(before[i], after[i]) for i in tags), get
        assert torch.equal(before[others], after[others]), get
    assert (final.parent / "checkpoint-1" / ROWS_FILE).is_file()

    # resume to step 2 (a copy of the run): the saved rows are put back before training continues (the rows moved
    # by about the learning rate, 1e-4, from the base model's: far outside allclose's tolerance)
    out = _copy_run(final.parent, tmp_path / "resume")
    built = build_sft_trainer(
        _config(out, model_dir, *ROWS_RUN, "optim.max_steps=2"), examples=examples, protocol=SHORT
    )
    assert built.resume_from == out / "run" / "checkpoint-1"
    emb = built.trainer.model.get_input_embeddings().weight
    assert all(torch.allclose(emb[i].float(), model.get_input_embeddings().weight[i]) for i in tags)


def test_token_rows_learning_rate_moves_the_rows_further_and_survives_resume(tmp_path, tiny_model_dir, rows_run):
    """model.token_rows_learning_rate: the tag rows get a group of their own at that rate (read from the
    optimizer), move much further in one step than at optim.learning_rate, every other row stays exactly as it
    was, the rows' metrics are in metrics.jsonl, and a resumed run keeps the group and its rate."""
    import torch

    from tirl.models import load
    from tirl.runs.metrics import read_metrics
    from tirl.train.sft import build_sft_trainer
    from tirl.train.token_rows import row_weights

    examples = load_sft_set("gsm8k_tir", slice(0, 1), SHORT)
    base, tok = load(tiny_model_dir, dtype="float32")
    vocab = tok.get_vocab()
    tags = [vocab["<tool_call>"], vocab["</tool_call>"]]
    before = base.get_input_embeddings().weight.detach()
    others = torch.ones(before.shape[0], dtype=torch.bool)
    others[tags] = False

    def moved(built):
        emb = built.trainer.model.get_input_embeddings().weight.detach()
        return built, emb, (emb[tags] - before[tags]).norm(dim=1)

    def run(name, steps, *extra):
        cfg = _config(tmp_path / name, tiny_model_dir, *ROWS_RUN, f"optim.max_steps={steps}", *extra)
        built = build_sft_trainer(cfg, examples=examples, protocol=SHORT)
        built.trainer.train(resume_from_checkpoint=str(built.resume_from) if built.resume_from else None)
        return moved(built)

    plain, plain_emb, plain_moved = moved(rows_run[0])  # the module's run: ROWS_RUN, 1 step, the rows at 1e-4
    fast, fast_emb, fast_moved = run("fast", 1, "model.token_rows_learning_rate=1e-2")
    assert (plain_moved > 0).all() and (fast_moved > 10 * plain_moved).all(), (plain_moved, fast_moved)
    assert torch.equal(plain_emb[others], before[others]) and torch.equal(fast_emb[others], before[others])

    (emb_weight,) = row_weights(fast.trainer.model)  # tied: one weight
    rows_group = [g for g in fast.trainer.optimizer.param_groups if any(p is emb_weight for p in g["params"])]
    assert len(rows_group) == 1 and len(rows_group[0]["params"]) == 1
    assert rows_group[0]["lr"] == 1e-2 and rows_group[0]["weight_decay"] == 0.0
    assert {g["lr"] for g in fast.trainer.optimizer.param_groups if g is not rows_group[0]} == {1e-4}
    assert all(g["lr"] == 1e-4 for g in plain.trainer.optimizer.param_groups)  # None: today's groups

    logged = [r for r in read_metrics(tmp_path / "fast" / "run") if "loss" in r]
    unit = torch.nn.functional.normalize(fast_emb[tags].float(), dim=1)
    assert len(logged) == 1
    assert logged[0]["token_rows/max_cosine"] == pytest.approx(float(unit[0] @ unit[1]), abs=1e-5)
    assert logged[0]["token_rows/mean_norm"] == pytest.approx(float(fast_emb[tags].norm(dim=1).mean()), abs=1e-5)

    resumed, resumed_emb, resumed_moved = run("fast", 2, "model.token_rows_learning_rate=1e-2")
    assert resumed.resume_from is not None and resumed.resume_from.name == "checkpoint-1"
    assert resumed.trainer.state.global_step == 2
    assert resumed.trainer.optimizer.param_groups[-1]["lr"] == 1e-2
    assert not torch.equal(resumed_emb[tags], fast_emb[tags]) and torch.equal(resumed_emb[others], before[others])


@pytest.mark.parametrize("tied", [True, False])
def test_token_rows_group_holds_the_row_weights_and_follows_the_schedule(request, tmp_path, tiny_model_dir, tied):
    """The rows' group holds exactly the embedding (and untied LM-head) weights, no other group holds them, and
    the scheduler scales both groups alike (their ratio stays the set one as the cosine decays)."""
    from tirl.train.sft import build_sft_trainer
    from tirl.train.token_rows import row_weights

    model_dir = tiny_model_dir if tied else request.getfixturevalue("untied_model_dir")
    examples = load_sft_set("gsm8k_tir", slice(0, 2), SHORT)
    cfg = _config(
        tmp_path,
        model_dir,
        *ROWS,
        "optim.learning_rate=1e-4",
        "model.token_rows_learning_rate=3e-3",
        "optim.lr_scheduler_type=cosine",
        "optim.max_steps=4",
    )
    trainer = build_sft_trainer(cfg, examples=examples, protocol=SHORT).trainer
    weights = row_weights(trainer.model)
    assert len(weights) == (1 if tied else 2)
    *rest, rows_group = trainer.optimizer.param_groups
    assert [id(p) for p in rows_group["params"]] == [id(w) for w in weights]
    assert not any(p is w for g in rest for p in g["params"] for w in weights)
    assert any(g["params"] for g in rest)  # the LoRA weights are still trained, in Trainer's own groups
    scheduler = trainer.create_scheduler(4, optimizer=trainer.optimizer)
    seen = []
    for _ in range(3):
        groups = trainer.optimizer.param_groups
        assert all(g["lr"] == pytest.approx(rows_group["lr"] * 1e-4 / 3e-3) for g in groups[:-1])
        seen.append(rows_group["lr"])
        trainer.optimizer.step()  # no gradients: nothing moves, but the scheduler expects a step first
        scheduler.step()
    assert seen[0] == pytest.approx(3e-3) and seen[0] > seen[1] > seen[2] > 0


def test_rows_metrics_and_console_note():
    """token_rows/max_cosine is the largest off-diagonal cosine of one weight's rows (the larger of embedding and
    untied head), token_rows/mean_norm the mean row norm over both; one row has no cosine."""
    import math

    import torch

    from tirl.train.callbacks import rows_note
    from tirl.train.token_rows import rows_metrics

    class Stub:
        def __init__(self, embed, head):
            self.embed, self.head = torch.nn.Embedding(4, 2), torch.nn.Linear(2, 4, bias=False)
            with torch.no_grad():
                self.embed.weight.copy_(torch.tensor(embed))
                self.head.weight.copy_(torch.tensor(head))

        def get_input_embeddings(self):
            return self.embed

        def get_output_embeddings(self):
            return self.head

    model = Stub([[9, 9], [1, 0], [1, 1], [0, 1]], [[9, 9], [2, 0], [0, 2], [-1, 0]])
    got = rows_metrics(model, [1, 2])
    assert got["token_rows/max_cosine"] == pytest.approx(1 / math.sqrt(2))  # the head's rows are orthogonal
    assert got["token_rows/mean_norm"] == pytest.approx((1 + math.sqrt(2) + 2 + 2) / 4)
    assert rows_metrics(model, [1, 3])["token_rows/max_cosine"] == pytest.approx(0.0)  # -1 (head) < 0 (embed)
    assert "token_rows/max_cosine" not in rows_metrics(model, [2])
    assert rows_note(got) == "  rows cos 0.707 norm 1.604"
    assert rows_note({"loss": 1.0}) == ""


def test_train_token_rows_config_errors(tmp_path, tiny_model_dir):
    from tirl.train.config import load_config

    with pytest.raises(ValueError, match="lora"):
        _config(tmp_path, tiny_model_dir, "model.train_token_rows=[<tool_call>]").validate()
    with pytest.raises(ValueError, match="weight_decay"):
        _config(
            tmp_path,
            tiny_model_dir,
            "model.train_token_rows=[<tool_call>]",
            "model.lora.enabled=true",
            "optim.weight_decay=0.1",
        ).validate()
    with pytest.raises(ValueError, match="SFT stage"):
        load_config(None, ["model.train_token_rows=[<tool_call>]"]).validate(1)
    for bad in ("0", "-1e-3", ".nan"):
        with pytest.raises(ValueError, match=r"^model\.token_rows_learning_rate must be > 0"):
            _config(tmp_path, tiny_model_dir, *ROWS, f"model.token_rows_learning_rate={bad}").validate()
    with pytest.raises(ValueError, match=r"^model\.token_rows_learning_rate needs model\.train_token_rows"):
        _config(tmp_path, tiny_model_dir, "model.lora.enabled=true", "model.token_rows_learning_rate=1e-2").validate()
    with pytest.raises(ValueError, match=r"^model\.token_rows_learning_rate is supported by the SFT stage"):
        load_config(None, ["model.token_rows_learning_rate=1e-2"]).validate(1)
    _config(tmp_path, tiny_model_dir, *ROWS, "model.token_rows_learning_rate=1e-2").validate()  # accepted


# ------------------------------------------------------------------------------------------------- config / CLI


def test_cli_prints_the_cpu_recipe_and_rejects_bad_keys(tmp_path):
    runner = CliRunner()
    result = runner.invoke(
        app,
        ["train", "sft", "--config", str(CONFIGS / "sft" / "cpu-qwen0.5b.yaml"), "--print-config", "optim.max_steps=7"],
    )
    assert result.exit_code == 0, result.output
    import yaml

    printed = yaml.safe_load(result.stdout)
    assert printed["optim"]["max_steps"] == 7 and printed["model"]["lora"]["enabled"] is True
    assert printed["merge_lora"] is True
    bad = runner.invoke(app, ["train", "sft", "--config", str(CONFIGS / "sft" / "cpu-qwen0.5b.yaml"), "optim.lr=1"])
    assert bad.exit_code == 2 and "unknown key" in bad.output
    odd = runner.invoke(
        app,
        [
            "train",
            "sft",
            "--config",
            str(CONFIGS / "sft" / "cpu-qwen0.5b.yaml"),
            "optim.batch_size=3",
            "optim.per_device_train_batch_size=2",
        ],
    )
    assert odd.exit_code == 2 and "multiple" in odd.output
