"""Tool trajectories built from the base model's own correct chain-of-thought (issue 43, recipe step 2).

One-shot prompting does not make the 0.5B base model call the tool in its native format (README, "Smoke
checks"), so rejection sampling in that format has nothing to keep. This script builds the tool trajectories from
what the model does well, so that the SFT stage teaches the call format without replacing the model's reasoning:

1. ``plan``: for each correct chain-of-thought sample of ``runs/real-math/cot-sample`` (the base model on the
   training problems, ``configs/cot-sample.yaml``), one plan of two assistant turns:
   - the model's reasoning (its text up to the sentence that states the boxed answer), a short connector, and a
     tool call; the call's program is the model's own ``python`` block when its chain-of-thought wrote exactly one
     (the text after it, its imagined ``output`` block dropped, is the second turn), otherwise a program the model
     writes when shown the problem and its own solution (the vLLM server, ``--server``, 2 samples at T = 0.7);
   - the second turn: a sentence stating the printed value and the model's own closing sentence with the box.
   Plans go to ``runs/real-math/tool-sft/plans.jsonl``; an existing plan is not rebuilt (the step resumes).
2. ``replay``: the plans through ``tirl eval``'s own loop (:func:`tirl.eval.runner.run_eval`, native prompt, the
   real sandbox and grader) with an engine that emits the planned turns: the programs run, the tool responses
   and records are exactly what an evaluation stores. Then the records are kept when the final answer is
   correct **and** the program's last printed line equals the reference (a program that prints something else
   is not evidence that the tool gave the answer). Kept records: ``runs/real-math/tool-sft/kept/trajectories.jsonl``,
   the SFT source ``trajectories:runs/real-math/tool-sft/kept`` (``data.trajectory_tokens: rerender``).

    python experiments/real-math/build_tool_sft.py plan   [--server http://127.0.0.1:18200] [--limit N]
    python experiments/real-math/build_tool_sft.py replay
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[2]
COT_STORE = ROOT / "runs" / "real-math" / "cot-sample" / "trajectories.jsonl"
OUT = ROOT / "runs" / "real-math" / "tool-sft"
PLANS = OUT / "plans.jsonl"
REPLAY = OUT / "replay"
KEPT = OUT / "kept"
MODEL = "qwen2.5-coder-0.5b-instruct"
END = "<|im_end|>"

CONNECTORS = (
    "Let me check this calculation with Python.",
    "I'll verify the result with a short program.",
    "Let's confirm the computation in Python.",
    "To make sure, I'll compute it with Python.",
)
READBACKS = (
    "The program printed {out}, which matches the calculation.",
    "The output is {out}, confirming the result.",
    "Python gives {out}, the same as above.",
)
PROGRAM_REQUEST = (
    "{problem}\n\nA correct solution:\n{reasoning}\n\nWrite a short Python program that does this solution's "
    "calculations with the numbers given in the problem and prints the final answer (only the number). Reply "
    "with the program in one ```python block."
)
FENCE = re.compile(r"```python\n(.*?)```", re.S)
OUTPUT_FENCE = re.compile(r"\s*```output\n.*?```", re.S)


def _pick(options: tuple[str, ...], key: str) -> str:
    """A deterministic choice among ``options`` by ``key`` (varied phrasing, reproducible plans)."""
    return options[int(hashlib.sha256(key.encode()).hexdigest(), 16) % len(options)]


def split_final(text: str) -> tuple[str, str] | None:
    """``(reasoning, closing)``: the text cut before the paragraph (or, in a long paragraph, the sentence or
    display block) that holds the last ``\\boxed``; None when there is no box or no reasoning before it."""
    box = text.rfind("\\boxed")
    if box < 0:
        return None
    para = text.rfind("\n\n", 0, box)
    start = para + 2 if para >= 0 else 0
    if box - start > 300:  # a long last paragraph: cut at the last sentence or line start before the box
        cut = max(text.rfind(". ", start, box), text.rfind("\n", start, box))
        start = cut + (2 if text[cut : cut + 2] == ". " else 1) if cut >= 0 else start
    reasoning, closing = text[:start].rstrip(), text[start:].strip()
    if len(reasoning) < 40 or "\\boxed" not in closing:
        return None
    return reasoning, closing


def own_program(text: str) -> tuple[str, str, str] | None:
    """``(before, code, after)`` when the chain-of-thought wrote exactly one ``python`` block before its box; the
    imagined ``output`` block after it is dropped (the real output replaces it)."""
    blocks = list(FENCE.finditer(text))
    if len(blocks) != 1:
        return None
    block = blocks[0]
    after = text[block.end() :]
    out = OUTPUT_FENCE.match(after)
    if out is not None:
        after = after[out.end() :]
    before, after = text[: block.start()].rstrip(), after.strip()
    if "\\boxed" not in after or "\\boxed" in before or len(before) < 40:
        return None
    return before, block.group(1).strip(), after


async def ask_program(session: aiohttp.ClientSession, server: str, problem: str, reasoning: str) -> list[str]:
    """Programs the model writes for its own solution (2 samples, T = 0.7); the ``python`` blocks found."""
    body = {
        "model": "base",
        "messages": [{"role": "user", "content": PROGRAM_REQUEST.format(problem=problem, reasoning=reasoning)}],
        "n": 2,
        "temperature": 0.7,
        "max_tokens": 400,
    }
    async with session.post(f"{server}/v1/chat/completions", json=body) as resp:
        resp.raise_for_status()
        data = await resp.json()
    programs = []
    for choice in data.get("choices", []):
        found = FENCE.search((choice.get("message") or {}).get("content") or "")
        if found and "print(" in found.group(1):
            programs.append(found.group(1).strip())
    return programs


def correct_cot_records(limit: int | None) -> list[dict[str, Any]]:
    """The correct, answered chain-of-thought samples, one per problem (the first in the store)."""
    seen, out = set(), []
    for line in COT_STORE.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec.get("correct") and rec.get("finish_reason") == "answer" and rec["problem_id"] not in seen:
            seen.add(rec["problem_id"])
            out.append(rec)
    return out[:limit] if limit else out


async def plan(server: str, limit: int | None, concurrency: int = 16) -> None:
    """Write one plan per correct chain-of-thought sample not yet planned (see the module docstring)."""
    from tirl.protocol.parse import render_tool_call

    config = _eval_config(REPLAY)
    OUT.mkdir(parents=True, exist_ok=True)
    done = {json.loads(line)["id"] for line in PLANS.open(encoding="utf-8")} if PLANS.exists() else set()
    todo = [r for r in correct_cot_records(limit) if r["problem_id"] not in done]
    print(f"{len(done)} plans already, {len(todo)} correct chain-of-thought samples to plan", flush=True)
    counts = {"own_program": 0, "asked_program": 0, "no_split": 0, "no_program": 0}
    semaphore = asyncio.Semaphore(concurrency)
    timeout = aiohttp.ClientTimeout(total=600)

    async def one(session: aiohttp.ClientSession, rec: dict[str, Any]) -> dict[str, Any] | None:
        text = rec["turns"][0]["text"].removesuffix(END)
        key = rec["problem_id"]
        own = own_program(text)
        if own is not None:
            before, code, after = own
            counts["own_program"] += 1
            candidates, first, closing = [code], before, after
        else:
            split = split_final(text)
            if split is None:
                counts["no_split"] += 1
                return None
            first, closing = split
            async with semaphore:
                candidates = await ask_program(session, server, rec["problem"], first)
            if not candidates:
                counts["no_program"] += 1
                return None
            counts["asked_program"] += 1
            first = f"{first}\n\n{_pick(CONNECTORS, key)}"
        return {
            "id": key,
            "problem": rec["problem"],
            "answer": rec["gold"],
            "source": "own_program" if own is not None else "asked_program",
            # one candidate turn per program; replay keeps the first whose output is the reference
            "first_turns": [f"{first}\n{render_tool_call(code, '', config.protocol)}" for code in candidates],
            "closing": closing,
        }

    async with aiohttp.ClientSession(timeout=timeout) as session:
        with PLANS.open("a", encoding="utf-8") as f:
            for n, task in enumerate(asyncio.as_completed([one(session, r) for r in todo]), 1):
                planned = await task
                if planned is not None:
                    f.write(json.dumps(planned) + "\n")
                    f.flush()
                if n % 50 == 0:
                    print(f"planned {n}/{len(todo)}: {counts}", flush=True)
    print(f"done: {counts}", flush=True)


def _eval_config(out_dir: Path, benchmark: Path | None = None) -> Any:
    """The replay's evaluation settings: the real-math tool file's protocol (native, hermes), 3 turns."""
    from tirl.eval.config import resolve_eval_config

    config, _ = resolve_eval_config(
        ROOT / "configs" / "eval" / "gsm8k-test-tool.yaml",
        {
            "benchmarks": [str(benchmark or PLANS)],
            "samples": 1,
            "out_dir": str(out_dir),
            "rollout": {"max_turns": 3, "max_response_tokens": 3072},
            "launch_server": False,
            "engine": "hf",
        },
        recipe=False,
    )
    return config


class PlannedEngine:
    """An engine that emits the planned turns: the plan found by the problem text in the prompt, the turn by
    the number of assistant turns so far. ``variant`` picks the candidate first turn of each plan."""

    def __init__(self, plans: dict[str, dict[str, Any]], tokenizer: Any, variant: dict[str, int]) -> None:
        self.plans, self.tokenizer, self.variant = plans, tokenizer, variant
        self.end_id = tokenizer.convert_tokens_to_ids(END)

    async def generate(self, prompt_ids: list[int], params: Any) -> Any:
        from tirl.rollout.engine import GenerationOutput

        text = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        plan = next(p for p in self.plans.values() if p["problem"] in text)
        turn = text.count("<|im_start|>assistant") - 1
        if turn == 0:
            body = plan["first_turns"][self.variant.get(plan["id"], 0)]
        else:
            out = plan.get("_printed", "")
            body = f"{_pick(READBACKS, plan['id']).format(out=out)}\n\n{plan['closing']}" if out else plan["closing"]
        ids = self.tokenizer.encode(body, add_special_tokens=False) + [self.end_id]
        return GenerationOutput(
            token_ids=ids[: params.max_new_tokens], logprobs=[0.0] * min(len(ids), params.max_new_tokens)
        )


def printed_value(record: dict[str, Any]) -> str | None:
    """The last non-empty line the record's one tool call printed, or None (no call, an error, no output)."""
    calls = [c for t in record.get("turns", []) for c in t.get("tool_calls") or []]
    if len(calls) != 1 or calls[0].get("cls") != "ok":
        return None
    result = calls[0].get("result") or {}
    stdout = result.get("stdout") if isinstance(result, dict) else None
    lines = [x.strip() for x in (stdout or "").splitlines() if x.strip()]
    return lines[-1] if lines else None


def equals_reference(printed: str | None, answer: str) -> bool:
    """The printed line is the (integer) reference: ``108``, ``108.0``, ``$108``, ``1,080``."""
    if printed is None:
        return False
    cleaned = printed.replace(",", "").replace("$", "").strip()
    try:
        return abs(float(cleaned) - float(answer)) < 1e-6
    except ValueError:
        return False


async def _run_programs(plans: dict[str, dict[str, Any]]) -> dict[str, tuple[int, str]]:
    """Each plan's first candidate program whose last printed line equals the reference: ``id -> (index, line)``,
    run in tirl's sandbox (the executor evaluation builds)."""
    from tirl.protocol.parse import parse_tool_calls
    from tirl.runtime import build_executor
    from tirl.sandbox.types import ExecutionRequest

    config = _eval_config(REPLAY)
    executor = build_executor(config.sandbox)
    found: dict[str, tuple[int, str]] = {}
    try:
        for n, plan in enumerate(plans.values(), 1):
            for i, turn in enumerate(plan["first_turns"]):
                [call] = parse_tool_calls(turn, config.protocol)
                result = await executor.run(ExecutionRequest(code=call.code, stdin=call.stdin))
                lines = [x.strip() for x in (result.stdout or "").splitlines() if x.strip()]
                if result.status == "ok" and lines and equals_reference(lines[-1], plan["answer"]):
                    found[plan["id"]] = (i, lines[-1])
                    break
            if n % 100 == 0:
                print(f"programs run for {n}/{len(plans)} plans; {len(found)} print the reference", flush=True)
    finally:
        await executor.aclose()
    return found


async def replay() -> None:
    """Replay the plans whose program prints the reference through the evaluation loop, then keep the records
    that are correct and whose recorded tool output is the reference (see the module docstring)."""
    from tirl.eval.components import build_default_components
    from tirl.eval.runner import run_eval
    from tirl.rollout.engine import SingleEngineRouter

    plans = {p["id"]: p for p in map(json.loads, PLANS.read_text(encoding="utf-8").splitlines())}
    found = await _run_programs(plans)
    print(f"{len(found)} of {len(plans)} plans have a program that prints the reference", flush=True)
    for pid, (_, line) in found.items():
        plans[pid]["_printed"] = line
    chosen = {pid: plans[pid] for pid in found}
    problems = OUT / "replay-problems.jsonl"
    problems.write_text(
        "".join(
            json.dumps({"id": p["id"], "problem": p["problem"], "answer": p["answer"]}) + "\n" for p in chosen.values()
        ),
        encoding="utf-8",
    )
    config = _eval_config(REPLAY, problems)
    config.engine = "openai"  # no model is loaded: the planned engine replaces the router below
    config.servers = ["http://127.0.0.1:9"]
    components = await build_default_components(config)
    components.router = SingleEngineRouter(
        PlannedEngine(chosen, components.tokenizer, {k: v[0] for k, v in found.items()})
    )
    try:
        result = await run_eval(config, components)
    finally:
        await components.aclose()
    print(result.summaries if hasattr(result, "summaries") else result, flush=True)
    KEPT.mkdir(parents=True, exist_ok=True)
    kept = 0
    with (KEPT / "trajectories.jsonl").open("w", encoding="utf-8") as f:
        for line in (REPLAY / "trajectories.jsonl").read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            if (
                rec.get("correct")
                and rec.get("finish_reason") == "answer"
                and equals_reference(printed_value(rec), str(rec.get("gold")))
            ):
                f.write(line + "\n")
                kept += 1
    print(f"kept {kept} trajectories in {KEPT / 'trajectories.jsonl'}", flush=True)


def _set_paths(cot_store: Path, out: Path) -> None:
    """Point the steps at another store and output folder (a small check away from the real run)."""
    global COT_STORE, OUT, PLANS, REPLAY, KEPT
    COT_STORE, OUT = cot_store, out
    PLANS, REPLAY, KEPT = out / "plans.jsonl", out / "replay", out / "kept"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["plan", "replay"])
    parser.add_argument("--server", default="http://127.0.0.1:18200")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--cot-store", type=Path, default=COT_STORE, help="the chain-of-thought samples (a check)")
    parser.add_argument("--out", type=Path, default=OUT, help="where plans, replay and kept go (a check)")
    args = parser.parse_args(argv)
    _set_paths(args.cot_store, args.out)
    if args.step == "plan":
        asyncio.run(plan(args.server, args.limit))
    else:
        asyncio.run(replay())


if __name__ == "__main__":
    sys.exit(main())
