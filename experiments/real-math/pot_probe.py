"""Does the base model solve more problems by writing a program than by reasoning in text? (issue 43, a probe)

The SFT data of the second attempt (``build_tool_sft.py``) puts the tool *after* the model's full chain-of-thought,
to check its last calculation: the program can only confirm what the text already concluded, so such a model can
at best match its own chain-of-thought. A coder model may do better when the program *is* the solution
(program-of-thought: the quantities of the problem as variables, the steps as statements, the answer printed).
This probe measures that on the base model, before any trajectory is built on it:

1. ``sample``: for each problem of an evaluation store (its ``problem_id``, ``problem`` and ``gold``; e.g. the
   held-out slice of ``sft-gsm8k-tool-200``), ``--samples`` chat completions from a vLLM server with the problem
   followed by :data:`POT_INSTRUCTION` (T = 0.6, 512 tokens). Appends to ``OUT/responses.jsonl``; resumes.
2. ``grade``: the last ``python`` block of each response runs in tirl's sandbox (the evaluation's executor,
   ``configs/eval/gsm8k-test-tool.yaml``'s ``sandbox:``); the sample is correct when the last line it prints
   equals the reference (:func:`build_tool_sft.equals_reference`: ``108``, ``108.0``, ``$108``, ``1,080``).
   Writes ``OUT/trajectories.jsonl`` with the keys ``compare_slice.py`` reads, so the probe compares with the
   base's chain-of-thought on the same problems:

    OUT=runs/real-math/pot-probe-200
    python experiments/real-math/pot_probe.py sample runs/real-math/sft-gsm8k-tool-200 --out $OUT
    python experiments/real-math/pot_probe.py grade --out $OUT
    python experiments/real-math/compare_slice.py runs/real-math/base-gsm8k-cot $OUT

Not an evaluation mode of ``tirl eval``: the program is run once, by the probe, not called by the model.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from build_tool_sft import FENCE, _eval_config, equals_reference  # noqa: E402

POT_INSTRUCTION = (
    "Solve the problem by writing a Python program: store the numbers given in the problem in variables, compute "
    "the answer step by step, and print the final answer (only the number). Reply with the program in one "
    "```python block."
)


def problems_of(store: Path, limit: int | None = None) -> list[dict[str, str]]:
    """The distinct problems of an evaluation store (or a problem file: ``id``, ``problem``, ``answer``), in
    ``problem_id`` order for a store and file order for a problem file; the first ``limit``."""
    file = store / "trajectories.jsonl" if store.is_dir() else store
    seen: dict[str, dict[str, str]] = {}
    for line in file.read_text(encoding="utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            pid = rec.get("problem_id", rec.get("id"))  # a store's record or a problem file's row
            seen.setdefault(
                pid, {"id": pid, "problem": rec["problem"], "gold": str(rec.get("gold", rec.get("answer")))}
            )
    ordered = [seen[k] for k in (sorted(seen) if store.is_dir() else seen)]
    return ordered[:limit] if limit else ordered


async def sample(
    store: Path, out: Path, server: str, samples: int, limit: int | None = None, concurrency: int = 16
) -> None:
    """Append ``samples`` responses per problem not yet sampled to ``out/responses.jsonl``."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "responses.jsonl"
    done = {json.loads(line)["id"] for line in path.open(encoding="utf-8")} if path.exists() else set()
    todo = [p for p in problems_of(store, limit) if p["id"] not in done]
    print(f"{len(done)} problems sampled already, {len(todo)} to sample", flush=True)
    semaphore = asyncio.Semaphore(concurrency)

    async def one(session: aiohttp.ClientSession, p: dict[str, str]) -> dict[str, Any]:
        body = {
            "model": "base",
            "messages": [{"role": "user", "content": f"{p['problem']}\n{POT_INSTRUCTION}"}],
            "n": samples,
            "temperature": 0.6,
            "max_tokens": 512,
        }
        async with semaphore, session.post(f"{server}/v1/chat/completions", json=body) as resp:
            resp.raise_for_status()
            data = await resp.json()
        texts = [(c.get("message") or {}).get("content") or "" for c in data.get("choices", [])]
        tokens = (data.get("usage") or {}).get("completion_tokens", 0)
        return {**p, "responses": texts, "completion_tokens": tokens}

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1800)) as session:
        with path.open("a", encoding="utf-8") as f:
            for n, task in enumerate(asyncio.as_completed([one(session, p) for p in todo]), 1):
                f.write(json.dumps(await task) + "\n")
                f.flush()
                if n % 25 == 0:
                    print(f"sampled {n}/{len(todo)}", flush=True)


async def grade(out: Path) -> None:
    """Run each response's last ``python`` block; write ``out/trajectories.jsonl`` and print the accuracy."""
    from tirl.runtime import build_executor
    from tirl.sandbox.types import ExecutionRequest

    rows = [json.loads(line) for line in (out / "responses.jsonl").read_text(encoding="utf-8").splitlines()]
    executor = build_executor(_eval_config(out / "unused").sandbox)
    counts = {"correct": 0, "no_program": 0, "error": 0, "wrong": 0}
    try:
        with (out / "trajectories.jsonl").open("w", encoding="utf-8") as f:
            for row in rows:
                tokens = row["completion_tokens"] / max(1, len(row["responses"]))
                for i, text in enumerate(row["responses"]):
                    blocks = FENCE.findall(text)
                    printed, status = None, "no_program"
                    if blocks:
                        result = await executor.run(ExecutionRequest(code=blocks[-1], stdin=""))
                        lines = [x.strip() for x in (result.stdout or "").splitlines() if x.strip()]
                        status = result.status
                        printed = lines[-1] if lines else None
                    correct = equals_reference(printed, str(row["gold"]))
                    key = (
                        "correct"
                        if correct
                        else ("no_program" if not blocks else "error" if status != "ok" else "wrong")
                    )
                    counts[key] += 1
                    rec = {
                        "problem_id": row["id"],
                        "sample_index": i,
                        "problem": row["problem"],
                        "gold": row["gold"],
                        "correct": correct,
                        "printed": printed,
                        "status": status,
                        "num_response_tokens": tokens,
                        "tool_classes": ["ok" if status == "ok" else "error"] if blocks else [],
                        "response_text": text,
                    }
                    f.write(json.dumps(rec) + "\n")
    finally:
        await executor.aclose()
    total = sum(counts.values())
    print(f"{total} samples: " + ", ".join(f"{k} {v} ({100 * v / max(1, total):.1f} %)" for k, v in counts.items()))


LEAD = "I'll solve this with a Python program."


def plans(out: Path, dest: Path) -> None:
    """SFT plans (``build_tool_sft.py``'s format) from the correct graded samples of ``out``: one per problem,
    the first correct sample; the first turn is the model's own text before its program (or :data:`LEAD` when it
    wrote none) and the program as a tool call, the second a read-back of the printed value and the boxed
    reference (a sample is correct only when the printed value equals it). ``build_tool_sft.py replay --out
    DEST`` then runs them through the evaluation loop and keeps the correct records."""
    from tirl.protocol.parse import render_tool_call

    config = _eval_config(dest / "replay")
    written: dict[str, dict[str, Any]] = {}
    for line in (out / "trajectories.jsonl").read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if not rec["correct"] or rec["problem_id"] in written:
            continue
        text = rec["response_text"]
        block = list(FENCE.finditer(text))[-1]
        lead = text[: block.start()].strip()
        lead = lead if 20 <= len(lead) <= 600 and "```" not in lead else LEAD
        written[rec["problem_id"]] = {
            "id": rec["problem_id"],
            "problem": rec["problem"],
            "answer": str(rec["gold"]),
            "source": "program_of_thought",
            "first_turns": [f"{lead}\n{render_tool_call(block.group(1).strip(), '', config.protocol)}"],
            "closing": f"So the answer is \\boxed{{{rec['gold']}}}.",
        }
    dest.mkdir(parents=True, exist_ok=True)
    with (dest / "plans.jsonl").open("w", encoding="utf-8") as f:
        for plan in written.values():
            f.write(json.dumps(plan) + "\n")
    print(f"{len(written)} plans in {dest / 'plans.jsonl'}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    s = sub.add_parser("sample")
    s.add_argument("store", type=Path, help="an evaluation store whose problems to sample")
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--server", default="http://127.0.0.1:18200")
    s.add_argument("--samples", type=int, default=2)
    s.add_argument("--limit", type=int, default=None, help="the first N problems only")
    g = sub.add_parser("grade")
    g.add_argument("--out", type=Path, required=True)
    pl = sub.add_parser("plans", help="SFT plans from the correct samples (then build_tool_sft.py replay --out)")
    pl.add_argument("--out", type=Path, required=True)
    pl.add_argument("--dest", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.step == "sample":
        asyncio.run(sample(args.store, args.out, args.server, args.samples, args.limit))
    elif args.step == "grade":
        asyncio.run(grade(args.out))
    else:
        plans(args.out, args.dest)


if __name__ == "__main__":
    sys.exit(main())
