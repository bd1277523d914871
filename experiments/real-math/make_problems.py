"""The training problems of the real-math experiment (issue 43), written as JSONL for ``tirl eval`` (sampling)
and ``tirl train rl`` (``data.sources``): a seeded sample of the packaged ``curated`` set, which is decontaminated
against GSM8K test and MATH-500 (``tirl data curate``'s defaults).

    python experiments/real-math/make_problems.py   # writes runs/real-math/data/{rft,rl,rl-gsm8k}-problems.jsonl

``rft``: the problems the base model is sampled on for the SFT stage (rejection sampling); ``rl``: the GRPO-RoC
pool, disjoint from ``rft``. GSM8K train and MATH train (integer answers) in the proportions given below.
``rl-gsm8k``: the GSM8K rows of ``rl`` alone (the RL run's pool since its first attempt: in its first 10 steps the
SFT model solved 1 of 88 samples of MATH problems at T = 1, against 32 of 232 on GSM8K; a group with no correct
sample carries no signal).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from tirl.data.training import load_rl_set

OUT = Path(__file__).resolve().parents[2] / "runs" / "real-math" / "data"
SIZES = {"rft": {"gsm8k": 1000, "math": 500}, "rl": {"gsm8k": 2000, "math": 1000}}
SEED = 43


def main() -> None:
    problems = load_rl_set("curated")
    pools = {
        "gsm8k": [p for p in problems if p.id.startswith("gsm8k-")],
        "math": [p for p in problems if p.id.startswith("math-")],
    }
    rng = random.Random(SEED)
    for pool in pools.values():
        rng.shuffle(pool)
    OUT.mkdir(parents=True, exist_ok=True)
    taken = {name: 0 for name in pools}
    for split, sizes in SIZES.items():
        rows = []
        for name, n in sizes.items():
            rows += pools[name][taken[name] : taken[name] + n]
            taken[name] += n
        with open(OUT / f"{split}-problems.jsonl", "w", encoding="utf-8") as f:
            for p in rows:
                f.write(json.dumps({"id": p.id, "problem": p.problem, "answer": p.answer}) + "\n")
        print(f"{OUT / f'{split}-problems.jsonl'}: {len(rows)} problems ({sizes})")
        if split == "rl":
            gsm8k = [p for p in rows if p.id.startswith("gsm8k-")]
            with open(OUT / "rl-gsm8k-problems.jsonl", "w", encoding="utf-8") as f:
                for p in gsm8k:
                    f.write(json.dumps({"id": p.id, "problem": p.problem, "answer": p.answer}) + "\n")
            print(f"{OUT / 'rl-gsm8k-problems.jsonl'}: {len(gsm8k)} problems")


if __name__ == "__main__":
    main()
