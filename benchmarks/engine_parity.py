"""Greedy parity of the colocated vLLM engine and the in-process HFEngine (issue 24, item 1).

Same weights, float32, the first N held-out ``toolmath`` prompts (the compact prompt of the toolmath recipes),
greedy decoding of one assistant turn up to ``--max-new-tokens``. The vLLM side is built the way TRL's colocated
mode builds it (``vllm.LLM`` with ``distributed_executor_backend="external_launcher"``,
``logprobs_mode="processed_logprobs"``) and driven through :class:`tirl.rollout.vllm_engine.VLLMEngine`, the
engine tirl's agent loop uses on it. Reports how many of the N token sequences are identical, and for each that
is not: the first differing position, the two tokens, each engine's log-prob of its own token there, and the HF
model's log-probs (fresh unbatched forward) of its top-1 and top-2 and of both tokens (a near tie, flipped by
the engines' different float32 summation orders, shows as a difference of a few 1e-3 nats or less), plus the
per-token log-prob gap on the common prefix.

Run with the vLLM environment (``make vllm-cpu``)::

    VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=0-1 PYTHONPATH=src \\
        .venv-vllm/bin/python benchmarks/engine_parity.py --model qwen2.5-coder-0.5b-tirl-sft -n 20

Writes ``benchmarks/results/engine_parity.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any


def _prompts(tokenizer: Any, n: int) -> list[list[int]]:
    from tirl.data.toolmath import heldout_problems
    from tirl.protocol import render_prompt_ids
    from tirl.protocol.config import ProtocolConfig

    proto = ProtocolConfig(prompt_style="compact")
    return [render_prompt_ids(tokenizer, p.problem, proto) for p in heldout_problems()[:n]]


async def _gather(engine: Any, prompts: list[list[int]], params: Any) -> list[Any]:
    return await asyncio.gather(*[engine.generate(p, params) for p in prompts])


def run_hf(folder: str, prompts: list[list[int]], params: Any, stops: list[int]) -> tuple[list[Any], float]:
    """Greedy outputs of :class:`tirl.rollout.hf_engine.HFEngine` (float32, one batch) and the wall time."""
    from tirl.models import load
    from tirl.rollout.hf_engine import HFEngine, HFEngineConfig

    model, _ = load(folder, dtype="float32")
    engine = HFEngine(model, HFEngineConfig(max_batch_size=len(prompts)), eos_token_ids=stops)
    t0 = time.perf_counter()
    outs = asyncio.run(_gather(engine, prompts, params))
    return outs, time.perf_counter() - t0


def build_colocated_llm(folder: str, max_model_len: int, max_num_seqs: int) -> Any:
    """A ``vllm.LLM`` as TRL's colocate mode builds it (trl 1.16 ``VLLMGeneration._init_vllm``), float32."""
    from vllm import LLM

    for key, value in (
        ("RANK", "0"),
        ("LOCAL_RANK", "0"),
        ("WORLD_SIZE", "1"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", os.environ.get("MASTER_PORT", "29541")),
    ):
        os.environ.setdefault(key, value)
    return LLM(
        model=folder,
        dtype="float32",
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        distributed_executor_backend="external_launcher",
        seed=0,
        max_num_batched_tokens=4096,
        logprobs_mode="processed_logprobs",
    )


def run_vllm(llm: Any, prompts: list[list[int]], params: Any) -> tuple[list[Any], float]:
    from tirl.rollout.vllm_engine import VLLMEngine

    engine = VLLMEngine(llm)
    t0 = time.perf_counter()
    outs = asyncio.run(_gather(engine, prompts, params))
    return outs, time.perf_counter() - t0


def margins_at(folder: str, rows: list[tuple[list[int], int, int, int]]) -> list[dict[str, float]]:
    """For each ``(prefix_ids, prompt, hf_token, vllm_token)`` at a first divergence: the HF model's (a fresh,
    unbatched float32 forward) log-probs of its top-1 and top-2 next tokens and of the two engines' tokens
    (nats)."""
    import torch

    from tirl.models import load

    model, _ = load(folder, dtype="float32")
    out = []
    with torch.no_grad():
        for ids, _, hf_tok, vl_tok in rows:
            lp = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].float(), -1)
            top = lp.topk(2)
            out.append(
                {
                    "top1_minus_top2": float(top.values[0] - top.values[1]),
                    "top1_is_hf_token": int(top.indices[0]) == hf_tok,
                    "hf_logprob_of_hf_token": float(lp[hf_tok]),
                    "hf_logprob_of_vllm_token": float(lp[vl_tok]),
                    "hf_token_minus_vllm_token": float(lp[hf_tok] - lp[vl_tok]),
                }
            )
    return out


def compare(prompts: list[list[int]], hf: list[Any], vl: list[Any]) -> dict[str, Any]:
    """Exact-match count, first divergences, and the log-prob gap on each common prefix."""
    rows, diverged, gaps = [], [], []
    for i, (p, a, b) in enumerate(zip(prompts, hf, vl)):
        ta, tb = list(a.token_ids), list(b.token_ids)
        k = next((j for j, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
        same = ta == tb
        for j in range(k):
            if j < len(a.logprobs) and j < len(b.logprobs):
                gaps.append(abs(a.logprobs[j] - b.logprobs[j]))
        row = {
            "prompt": i,
            "identical": same,
            "hf_tokens": len(ta),
            "vllm_tokens": len(tb),
            "first_diff": None if same else k,
            "hf_finish": a.finish_reason,
            "vllm_finish": b.finish_reason,
        }
        if not same and k < len(ta) and k < len(tb):
            row["hf_token"], row["vllm_token"] = ta[k], tb[k]
            if k < len(a.logprobs) and k < len(b.logprobs):  # each engine's log-prob of its own token there
                row["hf_engine_logprob"], row["vllm_engine_logprob"] = a.logprobs[k], b.logprobs[k]
            diverged.append((p + ta[:k], i, ta[k], tb[k]))
        rows.append(row)
    return {"rows": rows, "diverged": diverged, "gaps": gaps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-tirl-sft")
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=384)
    ap.add_argument("--out", default="benchmarks/results/engine_parity.json")
    args = ap.parse_args()

    from tirl.models import load_tokenizer, resolve
    from tirl.protocol.render import stop_token_ids
    from tirl.rollout.engine import SamplingParams

    folder = str(resolve(args.model))
    tok = load_tokenizer(folder)
    stops = list(stop_token_ids(tok))
    prompts = _prompts(tok, args.n)
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=0.0, stop_token_ids=stops)
    hf, hf_s = run_hf(folder, prompts, params, stops)
    llm = build_colocated_llm(folder, max(len(p) for p in prompts) + args.max_new_tokens + 8, len(prompts))
    vl, vl_s = run_vllm(llm, prompts, params)
    del llm
    result = compare(prompts, hf, vl)
    margins = margins_at(folder, result["diverged"]) if result["diverged"] else []
    by_prompt = {d[1]: m for d, m in zip(result["diverged"], margins)}
    for row in result["rows"]:
        if row["prompt"] in by_prompt:
            row.update({f"at_first_diff_{k}": v for k, v in by_prompt[row["prompt"]].items()})
    gaps = result["gaps"]
    identical = sum(r["identical"] for r in result["rows"])
    summary = {
        "model": args.model,
        "dtype": "float32",
        "prompts": len(prompts),
        "max_new_tokens": args.max_new_tokens,
        "identical": identical,
        "hf_wall_s": round(hf_s, 1),
        "vllm_wall_s": round(vl_s, 1),
        "common_prefix_tokens": len(gaps),
        "common_prefix_logprob_gap_mean": (sum(gaps) / len(gaps)) if gaps else None,
        "common_prefix_logprob_gap_max": max(gaps) if gaps else None,
        "note": "measured on the shared 2-core CPU machine beside other work; wall times are not comparable",
        "rows": result["rows"],
    }
    print(f"{identical} of {len(prompts)} greedy sequences identical (HFEngine {hf_s:.0f} s, vLLM {vl_s:.0f} s)")
    print("prompt  identical  first_diff  hf_tok  vllm_tok  HF lp(hf token) - lp(vLLM token) at first_diff (nats)")
    for r in result["rows"]:
        margin = r.get("at_first_diff_hf_token_minus_vllm_token")
        print(
            f"{r['prompt']:>6}  {r['identical']!s:>9}  {r['first_diff']!s:>10}  {r['hf_tokens']:>6}  "
            f"{r['vllm_tokens']:>8}  {'' if margin is None else f'{margin:.2e}'}"
        )
    if gaps:
        print(
            f"log-prob gap on common prefixes: mean {summary['common_prefix_logprob_gap_mean']:.2e}, "
            f"max {summary['common_prefix_logprob_gap_max']:.2e} over {len(gaps)} tokens"
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
