"""CI training test: GRPO-RoC steps on the tiny random model through TRL, the agent loop and HFEngine.

The tiny random model never writes a tool call by itself, so a scripted engine forces the first turn of every
trajectory to be a real tool call (run by a ``LocalSandbox``) and the second turn of every other trajectory to be
the correct answer (checked by ``tirl.reward``); the remaining second turns are sampled from the current policy by
``HFEngine``. This gives tool segments to mask and mixed rewards (non-zero advantages), so the update must move the
weights.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tirl.data.problem import Problem
from tirl.rollout.engine import GenerationOutput, SamplingParams
from tirl.train.config import load_config
from tirl.train.rollout_func import AgentLoopSource

pytestmark = pytest.mark.slow

TOOL_TURN = (
    "Let me compute it.\n<tool_call>\n"
    '{"name": "execute_python_code_with_standard_io", "arguments": {"code": "print(6*7)", "input": ""}}\n'
    "</tool_call><|im_end|>"
)
ANSWER_TURN = "The tool says 42.</reason>\n<answer>\\boxed{42}</answer><|im_end|>"
PROBLEMS = [Problem(id=f"p{i}", problem=f"What is 6 times 7? (variant {i})", answer="42") for i in range(4)]


class ScriptedToolEngine:
    """Forces turn 1 to a tool call and every other turn 2 to the right answer; otherwise samples the policy.

    Records every call as ``tuple(full prompt ids) -> [generated ids, ...]`` so a test can rebuild, independently of
    the agent loop, which completion positions the model generated.
    """

    def __init__(self, inner: Any, tokenizer: Any) -> None:
        self.inner = inner
        self.tokenizer = tokenizer
        self.tool_ids = tokenizer.encode(TOOL_TURN, add_special_tokens=False)
        self.answer_ids = tokenizer.encode(ANSWER_TURN, add_special_tokens=False)
        self.generated: dict[tuple[int, ...], list[list[int]]] = {}
        self.second_turns = 0

    def set_model(self, model: Any) -> None:
        self.inner.set_model(model)

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationOutput:
        text = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        last_user_turn = text.rsplit("<|im_start|>user", 1)[-1]
        if "<tool_response>" not in last_user_turn:
            out = GenerationOutput(token_ids=list(self.tool_ids), logprobs=[0.0] * len(self.tool_ids))
        else:
            self.second_turns += 1
            if self.second_turns % 2:
                out = GenerationOutput(token_ids=list(self.answer_ids), logprobs=[0.0] * len(self.answer_ids))
            else:
                out = await self.inner.generate(prompt_ids, params)
        # samples of one problem can share a prompt (identical scripted first turns): keep every output
        self.generated.setdefault(tuple(prompt_ids), []).append(list(out.token_ids[: params.max_new_tokens]))
        return out

    async def aclose(self) -> None:
        await self.inner.aclose()


def _config(tmp: Path, model_dir: Path, **extra: Any):
    overrides = [
        f"output_dir={tmp}",
        f"model.name_or_path={model_dir}",
        "model.dtype=float32",
        "max_steps=2",
        "problems_per_step=2",
        "save_steps=1",
        "rollout.group_size=2",
        "rollout.oversample=2",
        "rollout.max_turns=3",
        "rollout.max_response_tokens=128",
        "optim.per_device_train_batch_size=2",
        "optim.learning_rate=1e-3",
        "optim.warmup_steps=0",
        "optim.weight_decay=0.0",  # so that only a non-zero policy gradient can move the weights
        "roc.min_per_class=1",
        "logging.console=false",
        "logging.report_to=tensorboard",
    ] + [f"{k}={v}" for k, v in extra.items()]
    return load_config(None, overrides)


def _build(config: Any):
    from tirl.rollout.hf_engine import HFEngine, HFEngineConfig
    from tirl.train.rl import build_trainer

    holder: dict[str, Any] = {}

    def engine_factory(model: Any) -> Any:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(config.model.name_or_path)
        holder["engine"] = ScriptedToolEngine(HFEngine(model, HFEngineConfig(max_batch_size=8, seed=0)), tok)
        return holder["engine"]

    from tirl.models import load_tokenizer
    from tirl.reward.scorer import VerifierScorer
    from tirl.sandbox import LocalSandbox

    tokenizer = load_tokenizer(config.model.name_or_path)
    source = AgentLoopSource(
        config, tokenizer, executor_factory=lambda: LocalSandbox(workers=1), engine_factory=engine_factory
    )
    run = build_trainer(
        config, problems=PROBLEMS, source=source, scorer=VerifierScorer(tokenizer, source.verify), num_processes=1
    )
    return run, holder


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory, tiny_smollm2_model_dir):
    tmp = tmp_path_factory.mktemp("rl")
    config = _config(tmp, tiny_smollm2_model_dir)
    run, holder = _build(config)
    trainer = run.trainer
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    captured: list[dict[str, Any]] = []
    original = trainer._compute_loss

    def spy(model: Any, inputs: dict[str, Any]) -> Any:
        captured.append({k: v.detach().clone() for k, v in inputs.items() if hasattr(v, "detach")})
        return original(model, inputs)

    trainer._compute_loss = spy
    try:
        trainer.train()
    finally:
        run.close()
    after = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    return {
        "config": config,
        "run": run,
        "before": before,
        "after": after,
        "captured": captured,
        "engine": holder["engine"],
        "dir": tmp,
    }


def test_rewards_are_mixed(two_steps):
    # the scripted answers make half of the second turns correct: without mixed rewards the advantages would
    # all be 0 and the weight test below would prove nothing
    records = [json.loads(line) for line in (two_steps["dir"] / "metrics.jsonl").read_text().splitlines()]
    means = [r["tirl/reward/mean"] for r in records if "tirl/reward/mean" in r]
    assert means and all(0.0 < m < 1.0 for m in means)


def test_parameters_changed(two_steps):
    changed = [n for n in two_steps["before"] if not two_steps["before"][n].equal(two_steps["after"][n])]
    assert two_steps["run"].trainer.state.global_step == 2
    assert len(changed) > len(two_steps["before"]) // 2


def test_tool_output_tokens_have_loss_mask_zero(two_steps):
    engine = two_steps["engine"]
    rows = 0
    for batch in two_steps["captured"]:
        for prompt, pmask, comp, cmask, tmask in zip(
            batch["prompt_ids"],
            batch["prompt_mask"],
            batch["completion_ids"],
            batch["completion_mask"],
            batch["tool_mask"],
        ):
            prompt_ids = prompt[pmask.bool()].tolist()
            completion = comp[cmask.bool()].tolist()
            if len(completion) <= 1:
                continue  # a placeholder slot
            expected = [0] * len(completion)
            for k in range(len(completion)):
                outs = engine.generated.get(tuple(prompt_ids + completion[:k]), [])
                out = next((o for o in outs if completion[k : k + len(o)] == o[: len(completion) - k]), None)
                if out:
                    for j in range(k, min(len(completion), k + len(out))):
                        expected[j] = 1
            used = (tmask[: len(completion)] * cmask[: len(completion)]).tolist()
            assert used == expected
            injected = [t for t, m in zip(completion, used) if m == 0]
            assert injected, "every real trajectory here has a tool segment"
            assert "<tool_response>" in engine.tokenizer.decode(injected)
            rows += 1
    assert rows >= 4


def test_tool_calls_ran_in_the_local_sandbox(two_steps):
    last = two_steps["run"].rollout.last.trajectories
    records = [rec for t in last for rec in t.tool_call_records]
    assert len(records) == 8  # 2 problems x 4 samples, one forced call each
    assert all(rec.cls == "ok" and rec.result.stdout.strip() == "42" for rec in records)


def test_every_logged_metric_is_finite(two_steps):
    records = [json.loads(line) for line in (two_steps["dir"] / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "tirl/reward/mean" in r]
    assert [r["step"] for r in steps] == [1, 2]
    required = [
        "loss",
        "tirl/reward/mean",
        "tirl/accuracy",
        "tirl/tool_error_in_correct/before",
        "tirl/tool_error_in_correct/after",
        "tirl/p_format/mean",
        "tirl/length/mean",
        "tirl/length/p90",
        "tirl/truncation_rate",
        "tirl/tool_calls/per_traj",
        "tirl/groups/dropped",
        "tirl/time/rollout_s",
        "tirl/time/tool_exec_s",
        "tirl/time/verify_s",
        "tirl/time/update_s",
        "check/adv_diff_vs_trl",
    ]
    for rec in steps:
        missing = [k for k in required if k not in rec]
        assert not missing
        bad = {
            k: v
            for k, v in rec.items()
            if k not in ("stage",) and not (isinstance(v, (int, float)) and math.isfinite(v))
        }
        assert not bad


def test_tensorboard_events_written(two_steps):
    events = list(two_steps["dir"].rglob("events.out.tfevents.*"))
    assert events and all(e.stat().st_size > 0 for e in events)


def test_advantages_match_trl_grouping(two_steps):
    records = [json.loads(line) for line in (two_steps["dir"] / "metrics.jsonl").read_text().splitlines()]
    diffs = [r["check/adv_diff_vs_trl"] for r in records if "check/adv_diff_vs_trl" in r]
    assert diffs and max(diffs) < 1e-2


def test_checkpoints_written_each_step(two_steps):
    names = sorted(p.name for p in two_steps["dir"].iterdir() if p.name.startswith("checkpoint-"))
    assert names == ["checkpoint-1", "checkpoint-2"]
    assert (two_steps["dir"] / "checkpoint-2" / "optimizer.pt").exists()


def _copy_run(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_interrupted_run_resumes_from_last_checkpoint(two_steps, tmp_path):
    # simulate a crash after step 1 was checkpointed but before checkpoint-2: resume redoes step 2 only once
    import shutil

    run_dir = _copy_run(two_steps["dir"], tmp_path / "resumed")
    shutil.rmtree(run_dir / "checkpoint-2")
    config = _config(run_dir, two_steps["config"].model.name_or_path, max_steps=3, save_steps=100)
    run, _ = _build(config)
    assert run.resume_from == run_dir / "checkpoint-1"
    try:
        run.trainer.train(resume_from_checkpoint=str(run.resume_from))
    finally:
        run.close()
    assert run.trainer.state.global_step == 3
    assert run.rollout.calls == 2  # steps 2 and 3, not 1..3
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "tirl/reward/mean" in r] == [1, 2, 3]


def test_new_stage_starts_from_checkpoint_with_fresh_optimizer(two_steps, tmp_path):
    from safetensors.torch import load_file

    config = _config(tmp_path / "stage2", two_steps["config"].model.name_or_path, init_from=f"auto:{two_steps['dir']}")
    run, _ = _build(config)
    try:
        assert run.resume_from is None
        assert run.trainer.state.global_step == 0 and run.trainer.optimizer is None
        saved = load_file(str(two_steps["dir"] / "checkpoint-2" / "model.safetensors"))
        params = dict(run.trainer.model.named_parameters())
        loaded = [n for n in saved if n in params]
        assert loaded and all(params[n].detach().equal(saved[n]) for n in loaded)
        # and these are the trained weights, not the initial ones
        assert any(not two_steps["before"][n].equal(saved[n]) for n in loaded if n in two_steps["before"])
    finally:
        run.close()


def test_gradient_checkpointing_with_lora_trains(tmp_path, tiny_smollm2_model_dir):
    """``model.gradient_checkpointing`` (the toolfix recipes' memory fix: activations recomputed in the backward)
    with a LoRA policy: the step runs and moves the adapter, as without it (PEFT needs input gradients enabled for
    checkpointed blocks, or the adapter would get none)."""
    import torch

    config = _config(
        tmp_path,
        tiny_smollm2_model_dir,
        max_steps=1,
        **{"model.gradient_checkpointing": "true", "model.lora.enabled": "true"},
    )
    run, _ = _build(config)
    trainer = run.trainer
    assert trainer.args.gradient_checkpointing
    lora = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n and p.requires_grad}
    assert lora
    try:
        trainer.train()
    finally:
        run.close()
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(before, after[n].detach()) for n, before in lora.items())
