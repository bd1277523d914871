"""RL training data: packaged sets with provenance, local JSONL loading, synthetic problems with exact answers."""

from __future__ import annotations

import gzip
import hashlib
import json
import re

import pytest
import sympy

from tirl.data.training import (
    RL_DATA_DIR,
    RL_SETS,
    SYNTHETIC_KINDS,
    load_jsonl_problems,
    load_rl_set,
    load_training_problems,
    read_jsonl_problems,
    synthetic_problems,
    write_problems,
)

EXPECTED_ROWS = {"gsm8k": 7473, "math": 4874, "aime": 966, "champ": 79, "curated": 12121}


@pytest.mark.parametrize("name", sorted(RL_SETS))
def test_packaged_set_loads_with_integer_answers_and_unique_ids(name):
    problems = load_rl_set(name)
    assert len(problems) == EXPECTED_ROWS[name]
    assert len({p.id for p in problems}) == len(problems)
    assert all(re.fullmatch(r"-?\d+", p.answer) for p in problems)
    assert all(p.problem.strip() and p.source for p in problems)


def test_packaged_files_match_provenance_hashes():
    table = (RL_DATA_DIR / "PROVENANCE.md").read_text()
    for name, info in RL_SETS.items():
        row = next(line for line in table.splitlines() if line.startswith(f"| {info['file']} |"))
        hashes = re.findall(r"`([0-9a-f]{64})`", row)
        digest = hashlib.sha256(gzip.open(RL_DATA_DIR / info["file"]).read()).hexdigest()
        expected = hashes[1] if len(hashes) > 1 else hashes[0]  # "same" means equal to the source hash
        assert digest == expected, name


def test_limit_and_unknown_set():
    assert [p.id for p in load_rl_set("champ", 3)] == [p.id for p in load_rl_set("champ")[:3]]
    with pytest.raises(KeyError, match="known"):
        load_rl_set("nope")


def _numbers(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text)]


def _recompute(kind: str, text: str) -> int:
    """Independent recomputation from the problem text (sympy or brute force, not the generator's code)."""
    nums = _numbers(text)
    if kind == "multiply":
        return nums[0] * nums[1]
    if kind == "modpow":
        base, exp, mod = nums
        value = 1
        for _ in range(exp % (mod - 1) if base % mod else exp):  # Fermat, mod is prime
            value = value * base % mod
        return value if base % mod else 0
    if kind == "digit_sum_power":
        return sum(int(d) for d in str(sympy.Integer(nums[0]) ** nums[1]))
    if kind == "prime_count":
        return int(sympy.primepi(nums[0] - 1))
    if kind == "divisor_count":
        return int(sympy.divisor_count(nums[0]))
    if kind == "sum_of_powers":
        k = 2 if "squares" in text else 3
        return sum(i**k for i in range(1, nums[1] + 1))
    if kind == "multiply_small":
        return nums[0] * nums[1]
    if kind == "add3":
        return nums[0] + nums[1] - nums[2]
    if kind == "inclusion_exclusion":
        n, a, b = nums[1], nums[2], nums[3]
        return sum(1 for i in range(1, n + 1) if (i % a == 0) != (i % b == 0))
    if kind == "add_big":
        return nums[0] + nums[1] - nums[2] + nums[3]
    if kind == "gcd":
        import math

        return math.gcd(nums[0], nums[1])
    if kind == "count_digit":
        return "".join(str(i) for i in range(1, nums[2] + 1)).count(str(nums[0]))
    raise AssertionError(kind)


def test_synthetic_answers_are_exact():
    problems = (
        synthetic_problems(28, seed=3)
        + synthetic_problems(6, seed=3, kinds=["multiply_small", "add3"])
        + synthetic_problems(9, seed=3, kinds=["add_big", "gcd", "count_digit"])
    )
    assert {p.meta["kind"] for p in problems} == set(SYNTHETIC_KINDS)
    for p in problems:
        assert int(p.answer) == _recompute(p.meta["kind"], p.problem), p.problem


def test_synthetic_is_deterministic_and_seeded():
    assert synthetic_problems(10, seed=1) == synthetic_problems(10, seed=1)
    assert [p.problem for p in synthetic_problems(10, seed=1)] != [p.problem for p in synthetic_problems(10, seed=2)]
    assert {p.meta["kind"] for p in synthetic_problems(6, kinds=["modpow"])} == {"modpow"}
    with pytest.raises(ValueError):
        synthetic_problems(3, kinds=["riddles"])


def test_jsonl_rejects_non_integer_gold(tmp_path):
    # field case F83: a gold such as \sqrt{17} must never reach training as if it were checkable
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"id": "a", "problem": "x?", "answer": "\\sqrt{17}"}) + "\n")
    with pytest.raises(ValueError, match="not an integer"):
        load_jsonl_problems(path)
    assert load_jsonl_problems(path, skip_invalid=True) == []
    assert load_jsonl_problems(path, integer_only=False)[0].answer == "\\sqrt{17}"


def test_jsonl_errors_are_clear(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "x", "answer": "1"}\n{oops\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2"):
        load_jsonl_problems(bad)
    dup = tmp_path / "dup.jsonl"
    dup.write_text('{"id": 1, "problem": "x", "answer": "1"}\n{"id": 1, "problem": "y", "answer": "2"}\n')
    with pytest.raises(ValueError, match="duplicate"):
        load_jsonl_problems(dup)
    with pytest.raises(FileNotFoundError):
        load_jsonl_problems(tmp_path / "missing.jsonl")


def test_jsonl_normalises_answers_and_ids(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"problem": "x", "answer": "1,234"}\n\n{"problem": "y", "answer": 7, "level": 3}\n')
    probs = load_jsonl_problems(path)
    assert [(p.id, p.answer) for p in probs] == [("p-1", "1234"), ("p-3", "7")]
    assert probs[1].meta == {"level": 3}


def test_write_then_load_round_trip(tmp_path):
    probs = synthetic_problems(5, seed=9)
    assert write_problems(probs, tmp_path / "sub" / "hard.jsonl") == 5
    back = load_jsonl_problems(tmp_path / "sub" / "hard.jsonl")
    assert [(p.id, p.problem, p.answer, p.meta) for p in back] == [(p.id, p.problem, p.answer, p.meta) for p in probs]


def test_mixture_dedups_caps_and_rejects_unknown(tmp_path):
    mix = load_training_problems(["champ:5", "champ:3", "synthetic:4"], seed=0)
    assert len(mix) == 9 and len({p.id for p in mix}) == 9
    easy = load_training_problems(["synthetic:6:add3+multiply_small"], seed=0)
    assert sorted({p.meta["kind"] for p in easy}) == ["add3", "multiply_small"]
    assert load_training_problems(["champ"], seed=1) != load_training_problems(["champ"], seed=2)
    assert len(load_training_problems(["champ"], limit=7)) == 7
    with pytest.raises(ValueError, match="neither"):
        load_training_problems(["no-such-set"])
    with pytest.raises(ValueError):
        load_training_problems([])


def test_a_training_file_with_unreadable_rows_is_read_without_them_and_one_warning(tmp_path, caplog):
    # issue 45: one non-integer answer row stopped a whole training run
    path = tmp_path / "mine.jsonl"
    rows = [
        json.dumps({"problem": "1+1?", "answer": "2"}),
        json.dumps({"problem": "root?", "answer": "\\sqrt{17}"}),
        "{oops",
        json.dumps({"problem": "no answer"}),
        json.dumps({"problem": "2+2?", "answer": 4}),
    ]
    path.write_text("\n".join(rows) + "\n")
    with caplog.at_level("WARNING", logger="tirl.data.training"):
        problems = load_training_problems([str(path)], shuffle=False)
    assert [p.answer for p in problems] == ["2", "4"]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    assert "skipped 3 of 5 rows" in warnings[0] and "mine.jsonl:2" in warnings[0] and "not an integer" in warnings[0]
    read, skipped = read_jsonl_problems(path)
    assert len(read) == 2 and [why.split(":")[1] for why in skipped] == ["2", "3", "4"]
    with pytest.raises(ValueError, match="mine.jsonl:2"):  # the strict reader still refuses the file
        load_jsonl_problems(path)
