"""The Python part of ``benchmarks/gpu_check.sh``: a few GRPO-RoC steps of a randomly initialised model of a real
architecture, with tool calls through the real local sandbox, timed.

What it runs: the trainer ``tirl train rl`` builds (:func:`tirl.train.rl.build_trainer`: TRL's ``GRPOTrainer``
subclass, the agent loop on the in-process ``HFEngine`` over the trainer's own weights, the ``LocalSandbox`` pool,
the verifier, RoC selection, the update), for ``--steps`` steps on one device. The model is built here from a
config of Qwen2.5-1.5B's shape (``--shape qwen2.5-1.5b``: 28 layers, hidden 1536, 12 heads / 2 KV heads, vocab
151,936, tied embeddings; about 1.54B parameters) with random weights, on the Qwen2.5 tokenizer given by
``--tokenizer`` (a folder: the one tirl builds from its packaged Qwen2.5-Coder GGUF, carried by the shell script).
``--shape tiny`` is a 2-layer model of the same architecture for the CPU test (tests/test_gpu_check.py, on the
SmolLM2 tokenizer there: the update's cost on CPU is mostly the vocabulary-sized logits).

A random model never writes a tool call, so the first turn of every trajectory is scripted to one real tool call
(a small numpy computation run by the sandbox) and the second turn of every other trajectory to the correct
answer; the other second turns are sampled from the policy by ``HFEngine`` up to the token budget (a random model
never stops by itself), which is where the rollout time goes. That is the only difference from ``tirl train rl``.

Prints a per-step table (step, rollout, tools, verify, update seconds; generated tokens and tokens/s of the
rollout; peak device memory) and writes it as JSON (``--json``). Exit status 1 when a check fails: fewer steps
than asked, a tool call that did not run ``ok`` in the sandbox, a non-finite loss, or weights that did not move.

Usage: python benchmarks/gpu_check.py --tokenizer DIR --out DIR [--shape qwen2.5-1.5b|tiny] [--device cuda]
       [--dtype bfloat16] [--steps 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import resource
import sys
import time
from pathlib import Path
from typing import Any

# Qwen2.5-1.5B's config.json (the architecture fields), and a tiny model of the same family for the CPU test.
SHAPES: dict[str, dict[str, Any]] = {
    "qwen2.5-1.5b": {
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "vocab_size": 151936,
        "initializer_range": 0.02,
    },
    "tiny": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": True,
        "initializer_range": 0.1,
    },
}
# Per-shape run sizes: (problems per step, G, response-token budget, sandbox workers).
RUN_SIZES = {"qwen2.5-1.5b": (8, 4, 384, 8), "tiny": (2, 2, 120, 1)}  # the tool turn is ~50 tokens

TOOL_CODE = "import numpy as np\\nprint(int(np.arange(6).sum() + np.arange(7).sum() + 6))"
TOOL_TURN = (
    "Let me compute it.\n<tool_call>\n"
    '{"name": "execute_python_code_with_standard_io", "arguments": {"code": "'
    + TOOL_CODE
    + '", "input": ""}}\n</tool_call><|im_end|>'
)
ANSWER_TURN = "The tool says 42.</reason>\n<answer>\\boxed{42}</answer><|im_end|>"


def build_model(tokenizer_dir: Path, out_dir: Path, shape: str, device: str, dtype: str, seed: int = 0) -> Path:
    """A random Qwen2-architecture model of ``shape`` on the tokenizer in ``tokenizer_dir``, saved to ``out_dir``.

    The weights are initialised on ``device`` in ``dtype`` (seconds on a GPU for 1.5B parameters) and saved as
    safetensors with the tokenizer and a ``generation_config.json`` whose ``eos_token_id`` lists the stop ids.
    """
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    from tirl.models.loading import generation_eos_ids

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    stops = generation_eos_ids(tokenizer_dir)
    fields = dict(SHAPES[shape])
    fields.setdefault("vocab_size", max(len(tok), max(tok.get_vocab().values()) + 1))
    config = Qwen2Config(**fields, bos_token_id=tok.bos_token_id, eos_token_id=stops[0], pad_token_id=tok.pad_token_id)
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(config).to(getattr(torch, dtype))
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=stops, pad_token_id=tok.pad_token_id
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir))
    tok.save_pretrained(str(out_dir))
    (out_dir / "tirl_source.json").write_text(
        json.dumps({"gpu_check_shape": shape, "seed": seed, "stop_token_ids": stops}) + "\n"
    )
    n_params = sum(p.numel() for p in model.parameters())
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    print(f"model: random {shape} ({n_params / 1e9:.3f}B parameters, {dtype}) in {out_dir}", flush=True)
    return out_dir


class ScriptedToolEngine:
    """Turn 1: one scripted tool call; every other turn 2: the right answer; the rest sampled by ``inner``.

    ``stats`` is the inner ``HFEngine``'s (generated-token and time counters)."""

    def __init__(self, inner: Any, tokenizer: Any) -> None:
        self.inner = inner
        self.tokenizer = tokenizer
        self.tool_ids = tokenizer.encode(TOOL_TURN, add_special_tokens=False)
        self.answer_ids = tokenizer.encode(ANSWER_TURN, add_special_tokens=False)
        self.second_turns = 0
        self.stats = getattr(inner, "stats", None)
        self.max_model_len = getattr(inner, "max_model_len", None)

    def set_model(self, model: Any) -> None:
        self.inner.set_model(model)

    async def generate(self, prompt_ids: list[int], params: Any) -> Any:
        from tirl.rollout.engine import GenerationOutput

        text = self.tokenizer.decode(prompt_ids[-400:], skip_special_tokens=False)
        if "<tool_response>" not in text.rsplit("<|im_start|>user", 1)[-1]:
            return GenerationOutput(token_ids=list(self.tool_ids), logprobs=[0.0] * len(self.tool_ids))
        self.second_turns += 1
        if self.second_turns % 2:
            return GenerationOutput(token_ids=list(self.answer_ids), logprobs=[0.0] * len(self.answer_ids))
        return await self.inner.generate(prompt_ids, params)

    async def aclose(self) -> None:
        await self.inner.aclose()


def peak_memory(device: str) -> tuple[str, float]:
    """(what, GiB): the device's peak allocated memory on CUDA, else this process's peak RSS."""
    if device.startswith("cuda"):
        import torch

        return "peak GPU memory allocated", torch.cuda.max_memory_allocated() / 2**30
    return "peak RSS", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def run_check(args: argparse.Namespace) -> dict[str, Any]:
    """Build the model, train ``args.steps`` steps, and return the report (also written to ``args.json``)."""
    import torch
    import transformers
    from transformers import TrainerCallback

    from tirl.data.problem import Problem
    from tirl.models import load_tokenizer
    from tirl.reward.scorer import VerifierScorer
    from tirl.rollout.hf_engine import HFEngine, HFEngineConfig
    from tirl.train.config import load_config
    from tirl.train.rl import build_trainer
    from tirl.train.rollout_func import AgentLoopSource

    t_start = time.perf_counter()
    out = Path(args.out)
    versions = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    for name in ("accelerate", "trl", "peft", "datasets"):
        try:
            versions[name] = __import__(name).__version__
        except ImportError:
            versions[name] = "missing"
    device_name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else platform.processor() or "cpu"
    print(f"versions: {versions}; device: {device_name}", flush=True)
    t0 = time.perf_counter()
    model_dir = build_model(Path(args.tokenizer), out / "model", args.shape, args.device, args.dtype)
    build_s = time.perf_counter() - t0

    problems_per_step, group, budget, workers = RUN_SIZES[args.shape]
    config = load_config(
        None,
        [
            f"output_dir={out / 'run'}",
            f"model.name_or_path={model_dir}",
            f"model.dtype={args.dtype}",
            f"max_steps={args.steps}",
            f"problems_per_step={problems_per_step}",
            "save_steps=100000",
            "resume=false",
            f"rollout.group_size={group}",
            "rollout.oversample=2",
            "rollout.max_turns=2",
            f"rollout.max_response_tokens={budget}",
            "sandbox.backend=local",
            f"sandbox.workers={workers}",
            f"rollout.engine_batch_size={2 * group * problems_per_step}",
            f"optim.per_device_train_batch_size={group * problems_per_step}",
            "optim.learning_rate=1e-5",
            "optim.warmup_steps=0",
            "roc.min_per_class=1",
            "logging.console=false",
            "logging.report_to=none",
            "watchdog.enabled=false",
        ],
    )
    problems = [
        Problem(id=f"p{i}", problem=f"What is 6 times 7? (variant {i})", answer="42")
        for i in range(problems_per_step * args.steps)
    ]
    tokenizer = load_tokenizer(str(model_dir))
    holder: dict[str, Any] = {}

    def engine_factory(model: Any) -> Any:
        inner = HFEngine(model, HFEngineConfig(max_batch_size=2 * group * problems_per_step, seed=0))
        holder["engine"] = ScriptedToolEngine(inner, tokenizer)
        return holder["engine"]

    source = AgentLoopSource(config, tokenizer, engine_factory=engine_factory)
    run = build_trainer(
        config, problems=problems, source=source, scorer=VerifierScorer(tokenizer, source.verify), num_processes=1
    )
    trainer = run.trainer
    probe_name, probe = next((n, p) for n, p in trainer.model.named_parameters() if "layers.0.mlp" in n)
    probe_before = probe.detach().float().clone()
    memory: list[float] = []
    tool_calls: list[dict[str, int]] = []

    class PerStep(TrainerCallback):
        def on_step_end(self, *_: Any, **__: Any) -> None:
            memory.append(peak_memory(args.device)[1])
            records = [rec for t in run.rollout.last.trajectories for rec in t.tool_call_records]
            tool_calls.append({"calls": len(records), "ok": sum(rec.cls == "ok" for rec in records)})

    trainer.add_callback(PerStep())
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    try:
        trainer.train()
    finally:
        run.close()
    train_s = time.perf_counter() - t0
    moved = float((probe.detach().float() - probe_before).abs().max())

    records = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    records = [rec for rec in records if "tirl/time/rollout_s" in rec]  # the steps (not the run's summary line)
    rows = []
    for i, rec in enumerate(records):
        g = lambda key, rec=rec: float(rec.get("tirl/" + key, float("nan")))  # noqa: E731
        tokens = g("engine/decode_tokens")
        rows.append(
            {
                "step": int(rec.get("step", i + 1)),
                "step_s": g("time/step_s"),
                "rollout_s": g("time/rollout_s"),
                "tools_s": g("time/tool_exec_s"),
                "verify_s": g("time/verify_s"),
                "update_s": g("time/update_s"),
                "generated_tokens": tokens,
                "tokens_per_s": tokens / max(g("time/rollout_s"), 1e-9),
                "loss": float(rec.get("loss", float("nan"))),
                "peak_memory_gib": memory[i] if i < len(memory) else float("nan"),
                **(tool_calls[i] if i < len(tool_calls) else {"calls": 0, "ok": 0}),
            }
        )
    what, peak = peak_memory(args.device)
    problems_found = []
    if len(rows) < args.steps:
        problems_found.append(f"{len(rows)} steps logged, {args.steps} asked")
    if any(r["calls"] == 0 or r["ok"] != r["calls"] for r in rows):
        problems_found.append("a step whose tool calls did not all run ok in the sandbox")
    if any(not math.isfinite(r["loss"]) for r in rows):
        problems_found.append("a non-finite loss")
    if not moved > 0:
        problems_found.append(f"{probe_name} did not change")
    report = {
        "shape": args.shape,
        "device": args.device,
        "device_name": device_name,
        "dtype": args.dtype,
        "versions": versions,
        "problems_per_step": problems_per_step,
        "group_size": group,
        "sampled_per_step": 2 * group * problems_per_step,
        "max_response_tokens": budget,
        "model_build_s": build_s,
        "train_s": train_s,
        "total_s": time.perf_counter() - t_start,
        "peak_memory": {"what": what, "gib": peak},
        "weight_change_max": moved,
        "steps": rows,
        "failed_checks": problems_found,
    }
    print_table(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return report


def print_table(report: dict[str, Any]) -> None:
    """The per-step breakdown as a plain table."""
    cols = [
        ("step", "{:d}"),
        ("step_s", "{:.1f}"),
        ("rollout_s", "{:.1f}"),
        ("tools_s", "{:.2f}"),
        ("verify_s", "{:.2f}"),
        ("update_s", "{:.1f}"),
        ("generated_tokens", "{:.0f}"),
        ("tokens_per_s", "{:.0f}"),
        ("loss", "{:.4f}"),
        ("peak_memory_gib", "{:.2f}"),
        ("calls", "{:d}"),
        ("ok", "{:d}"),
    ]
    print(
        f"\nGPU check: {report['shape']} on {report['device_name']} ({report['dtype']}), "
        f"{report['sampled_per_step']} trajectories sampled per step, budget {report['max_response_tokens']}"
    )
    print("  ".join(f"{name:>10}" for name, _ in cols))
    for row in report["steps"]:
        print("  ".join(f"{fmt.format(row[name]):>10}" for name, fmt in cols))
    print(
        f"tools_s: sum of the sandbox calls' durations (they overlap); {report['peak_memory']['what']}: "
        f"{report['peak_memory']['gib']:.2f} GiB; model build {report['model_build_s']:.0f} s, "
        f"training {report['train_s']:.0f} s, total {report['total_s']:.0f} s"
    )
    failed = report["failed_checks"]
    print("checks: " + ("all passed" if not failed else "FAILED: " + "; ".join(failed)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", required=True, help="Qwen2.5 tokenizer folder (tokenizer.json, ...)")
    parser.add_argument("--out", required=True, help="work folder (model, run)")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-1.5b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32", "float16"])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--json", default=None, help="write the report here")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print(
                "gpu_check: no CUDA device visible (torch.cuda.is_available() is False); use --device cpu "
                "--shape tiny for the CPU self-test",
                file=sys.stderr,
            )
            return 2
    report = run_check(args)
    return 1 if report["failed_checks"] else 0


if __name__ == "__main__":
    sys.exit(main())
