"""Rollout-shaped generation on CPU: bf16 against float32, and optionally a vLLM-CPU server, same process.

The workload of one step of ``configs/rl/cpu-toolmath-roc.yaml``'s first turn: 4 held-out toolmath problems x 8
samples in the compact prompt, every request generating exactly ``--new-tokens`` tokens (stop ids and EOS
disabled, so every phase does the same work), all 32 issued at once. Phases:

- ``hf_bfloat16`` (baseline): ``HFEngine`` on the packaged Qwen2.5-Coder-0.5B in bf16 (what the models'
  default dtype was);
- ``hf_float32``: the same in float32;
- ``vllm`` (only with ``--vllm-url``): ``OpenAIEngine`` against a running vLLM-CPU server (token ids in and
  out, no per-request seed: vLLM-CPU 0.32 crashes on seeded requests whose prefill is chunked).

Each HF phase reports the engine's own split (prefill seconds, distinct prompt tokens computed, decode
seconds). ``--repeats`` alternates the HF phases to even out load changes. Prints a table and writes
``benchmarks/results/rollout_bench.json``; ratios are against the baseline of the same run.

Usage: ``python benchmarks/rollout_bench.py [--new-tokens 96] [--repeats 2] [--vllm-url http://127.0.0.1:18200
--vllm-model base]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tirl.data.benchmarks import load_benchmark
from tirl.models import load, load_tokenizer
from tirl.protocol import ProtocolConfig, render_prompt_ids
from tirl.rollout.engine import SamplingParams

MODEL = "qwen2.5-coder-0.5b-instruct"


def workload(tok, problems: int, samples: int) -> list[list[int]]:
    cfg = ProtocolConfig(prompt_style="compact")
    rows = load_benchmark("toolmath")[:problems]
    return [render_prompt_ids(tok, p.problem, cfg) for p in rows for _ in range(samples)]


async def run_engine(engine, prompts: list[list[int]], new_tokens: int, seeded: bool) -> tuple[float, int]:
    params = [
        SamplingParams(
            max_new_tokens=new_tokens, temperature=1.0, stop_token_ids=[], seed=(1000 + i) if seeded else None
        )
        for i in range(len(prompts))
    ]
    t0 = time.perf_counter()
    outs = await asyncio.gather(*[engine.generate(p, sp) for p, sp in zip(prompts, params)])
    return time.perf_counter() - t0, sum(len(o.token_ids) for o in outs)


def hf_phase(dtype: str, prompts: list[list[int]], new_tokens: int) -> dict:
    from tirl.rollout.hf_engine import HFEngine, HFEngineConfig

    model, _ = load(MODEL, dtype=dtype)
    engine = HFEngine(model, HFEngineConfig(max_batch_size=len(prompts)), eos_token_ids=[])
    wall, tokens = asyncio.run(run_engine(engine, prompts, new_tokens, seeded=True))
    s = engine.stats
    del engine, model
    return {
        "wall_s": wall,
        "tokens": tokens,
        "prefill_s": s.prefill_s,
        "prefill_tokens": s.prefill_tokens,
        "prompt_tokens_requested": s.prompt_tokens_requested,
        "decode_s": s.decode_s,
    }


def vllm_phase(url: str, model: str, prompts: list[list[int]], new_tokens: int) -> dict:
    from tirl.rollout.openai_engine import OpenAIEngine, OpenAIEngineConfig

    async def go() -> tuple[float, int]:
        async with OpenAIEngine(url, OpenAIEngineConfig(model=model, extra_body={"ignore_eos": True})) as eng:
            return await run_engine(eng, prompts, new_tokens, seeded=False)

    wall, tokens = asyncio.run(go())
    return {"wall_s": wall, "tokens": tokens}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=4)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--vllm-url", default=None)
    ap.add_argument("--vllm-model", default=None)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "rollout_bench.json"))
    args = ap.parse_args()
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

    tok = load_tokenizer(MODEL)
    prompts = workload(tok, args.problems, args.samples)
    runs: dict[str, list[dict]] = {"hf_bfloat16": [], "hf_float32": []}
    load_before = os.getloadavg()
    for _ in range(args.repeats):
        for dtype in ("bfloat16", "float32"):
            runs[f"hf_{dtype}"].append(hf_phase(dtype, prompts, args.new_tokens))
    if args.vllm_url:
        runs["vllm"] = [vllm_phase(args.vllm_url, args.vllm_model, prompts, args.new_tokens)]
    load_after = os.getloadavg()

    def best(rows: list[dict]) -> dict:
        return min(rows, key=lambda r: r["wall_s"])

    base = best(runs["hf_bfloat16"])
    base_rate = base["tokens"] / base["wall_s"]
    table = Table(
        title=f"{len(prompts)} requests ({args.problems} prompts x {args.samples}), "
        f"{args.new_tokens} new tokens each; load {load_before[0]:.1f} -> {load_after[0]:.1f}"
    )
    for col in ("phase", "wall s", "tokens/s", "ratio", "prefill s", "prompt tokens computed", "decode s"):
        table.add_column(col, justify="right" if col != "phase" else "left")
    result = {
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "args": vars(args),
        "phases": {},
    }
    for name, rows in runs.items():
        r = best(rows)
        rate = r["tokens"] / r["wall_s"]
        result["phases"][name] = {**r, "tokens_per_s": rate, "ratio": rate / base_rate, "all": rows}
        table.add_row(
            name,
            f"{r['wall_s']:.1f}",
            f"{rate:.1f}",
            f"{rate / base_rate:.2f}x",
            f"{r['prefill_s']:.1f}" if "prefill_s" in r else "-",
            f"{r['prefill_tokens']} of {r['prompt_tokens_requested']}" if "prefill_tokens" in r else "-",
            f"{r['decode_s']:.1f}" if "decode_s" in r else "-",
        )
    Console().print(table)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
