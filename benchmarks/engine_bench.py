"""HFEngine throughput: batched concurrent generation against one-at-a-time generation, same process and model.

Phases (each generates exactly ``--new-tokens`` tokens per request: stops and EOS are disabled, so every
phase does the same work):

- ``hf_generate_sequential`` (baseline): ``model.generate`` on one prompt at a time (a naive loop);
- ``engine_sequential``: ``HFEngine.generate`` awaited one request at a time (the engine's own overhead);
- ``engine_concurrent``: all requests issued at once from coroutines; the engine batches them.

Prints a table and writes ``benchmarks/results/engine_bench.json``. Ratios are against the baseline measured
in the same run; absolute tokens/s depend on the machine and its load.

Usage: ``python benchmarks/engine_bench.py [--model smollm2-135m-instruct] [--requests 16] [--new-tokens 32]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from tirl.models import load, load_tokenizer
from tirl.rollout.engine import SamplingParams
from tirl.rollout.hf_engine import HFEngine, HFEngineConfig

QUESTIONS = [
    "What is 17 times 23?",
    "Name a prime number above 100.",
    "Write a haiku about the sea.",
    "Explain what a derivative is.",
    "How many days are in a leap year?",
    "What is the capital of Peru?",
    "Sum the integers from 1 to 50.",
    "Give two uses of Python dictionaries.",
]


def prompts(tok, n: int) -> list[list[int]]:
    out = []
    for i in range(n):
        ids = tok.apply_chat_template(
            [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}], add_generation_prompt=True
        )
        out.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch intra-op threads (0: torch's default). On a machine shared with other jobs, 1 avoids "
        "thread oversubscription, which can slow every phase by an order of magnitude.",
    )
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "engine_bench.json"))
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    model, _ = load(args.model, dtype=args.dtype)
    tok = load_tokenizer(args.model)
    batch = prompts(tok, args.requests)
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, seed=0)
    engine = HFEngine(model, HFEngineConfig(max_batch_size=args.requests, seed=0), eos_token_ids=[])
    load_before = os.getloadavg()[0]
    rows = []

    def record(name: str, seconds: float, tokens: int, note: str = "") -> None:
        rows.append(
            {
                "phase": name,
                "seconds": round(seconds, 3),
                "tokens": tokens,
                "tokens_per_s": round(tokens / seconds, 2),
                "note": note,
            }
        )

    t = time.perf_counter()
    n_tok = 0
    with torch.no_grad():
        for p in batch:
            ids = torch.tensor([p])
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=True,
                temperature=1.0,
                max_new_tokens=args.new_tokens,
                min_new_tokens=args.new_tokens,
                eos_token_id=None,
                pad_token_id=0,
            )
            n_tok += out.shape[1] - len(p)
    record("hf_generate_sequential", time.perf_counter() - t, n_tok, "baseline")

    async def sequential() -> int:
        return sum([len((await engine.generate(p, params)).token_ids) for p in batch])

    async def concurrent() -> int:
        outs = await asyncio.gather(*[engine.generate(p, params) for p in batch])
        return sum(len(o.token_ids) for o in outs)

    t = time.perf_counter()
    n_tok = asyncio.run(sequential())
    record("engine_sequential", time.perf_counter() - t, n_tok)
    before = engine.batches_run
    t = time.perf_counter()
    n_tok = asyncio.run(concurrent())
    record(
        "engine_concurrent",
        time.perf_counter() - t,
        n_tok,
        f"{engine.batches_run - before} batch(es), largest {engine.max_batch_seen}",
    )

    base = rows[0]["tokens_per_s"]
    for r in rows:
        r["ratio_vs_baseline"] = round(r["tokens_per_s"] / base, 2)
    expected = args.requests * args.new_tokens
    assert all(r["tokens"] == expected for r in rows), "every phase must generate the same number of tokens"

    table = Table(
        title=f"HFEngine throughput: {args.model} {args.dtype}, {args.requests} requests x {args.new_tokens} new tokens"
    )
    for col in ("phase", "seconds", "tokens", "tokens/s", "x baseline", "note"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["phase"],
            str(r["seconds"]),
            str(r["tokens"]),
            str(r["tokens_per_s"]),
            str(r["ratio_vs_baseline"]),
            r["note"],
        )
    Console(width=140).print(table)
    result = {
        "model": args.model,
        "dtype": args.dtype,
        "requests": args.requests,
        "new_tokens": args.new_tokens,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "load_avg_before": round(load_before, 2),
        "load_avg_after": round(os.getloadavg()[0], 2),
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"load average {result['load_avg_before']} before, {result['load_avg_after']} after; wrote {args.out}")


if __name__ == "__main__":
    main()
