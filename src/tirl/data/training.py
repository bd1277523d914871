"""RL training problems: the packaged integer-answer sets, local JSONL files, and synthetic problems.

Covers what ``tirl train rl`` and ``tirl data filter-hard`` read: :class:`Problem` records from

* the packaged sets (:data:`RL_SETS`: GSM8K train, MATH train with integer answers, AIME 1983-2023, CHAMP, and
  ``curated``, those four after ``tirl data curate`` (:mod:`tirl.data.curation`); gzip JSONL under
  ``tirl/data/rl/`` with their provenance and licenses in ``PROVENANCE.md`` there);
* any local JSONL file with ``problem`` and ``answer`` fields (the stage-3 hard subset written by
  ``tirl data filter-hard`` is one);
* :func:`synthetic_problems`: generated problems with exact integer answers where running code helps
  (multi-digit arithmetic, modular powers, digit sums of big powers, prime and divisor counts, sums of powers,
  inclusion-exclusion counts).

The report trains on integer answers only, so loaders reject a non-integer gold by default (a gold that
the verifier cannot parse would silently score every sample 0; field case F83). It does not load evaluation
benchmarks (``tirl.data`` benchmarks module) or SFT data, and does not curate or decontaminate
(:mod:`tirl.data.curation` does; see the provenance file).
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import random
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from tirl.data.problem import Problem

logger = logging.getLogger(__name__)

RL_DATA_DIR = Path(__file__).resolve().parent / "rl"

RL_SETS: dict[str, dict[str, str]] = {
    "gsm8k": {"file": "gsm8k_train.jsonl.gz", "license": "MIT", "upstream": "openai/grade-school-math@3101c7d"},
    "math": {"file": "math_train_int.jsonl.gz", "license": "MIT", "upstream": "agentica-project/rllm@874daa4"},
    "aime": {
        "file": "aime_1983_2023.jsonl.gz",
        "license": "MIT (problems (c) MAA)",
        "upstream": "agentica-project/rllm@874daa4",
    },
    "champ": {"file": "champ_int.jsonl.gz", "license": "MIT", "upstream": "champ-dataset==1.0.0"},
    "curated": {
        "file": "curated_int.jsonl.gz",
        "license": "MIT (as its four sources; AIME problems (c) MAA)",
        "upstream": "tirl data curate gsm8k math aime champ (docs/data.md)",
    },
}
"""Packaged RL sets: name -> file under :data:`RL_DATA_DIR`, license, upstream (details in PROVENANCE.md)."""

_INT_RE = re.compile(r"^-?\d+$")


def _from_row(row: dict[str, Any], where: str, integer_only: bool) -> Problem:
    problem, answer = row.get("problem"), row.get("answer")
    if not isinstance(problem, str) or not problem.strip():
        raise ValueError(f"{where}: missing or empty 'problem'")
    if isinstance(answer, int) and not isinstance(answer, bool):
        answer = str(answer)
    if not isinstance(answer, str) or not answer.strip():
        raise ValueError(f"{where}: missing or empty 'answer'")
    answer = answer.strip()
    if integer_only and not _INT_RE.match(answer.replace(",", "")):
        raise ValueError(f"{where}: answer {answer!r} is not an integer (integer_only=True)")
    meta = {k: v for k, v in row.items() if k not in ("id", "problem", "answer", "source")}
    return Problem(
        id=str(row.get("id", where)),
        problem=problem,
        answer=answer.replace(",", "") if integer_only else answer,
        source=str(row.get("source", "")),
        meta=meta,
    )


def _read_jsonl(path: Path, skipped: list[str] | None = None) -> Iterable[tuple[int, dict[str, Any]]]:
    """``(line number, row)`` of each non-blank line; a line that is not a JSON object raises, or, when
    ``skipped`` is a list, is left out with its reason appended there."""
    with gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh.read().split("\n"), 1):
            if line.strip():
                try:
                    row = json.loads(line)
                    if not isinstance(row, dict):
                        raise ValueError(f"{path}:{lineno}: expected a JSON object")
                except json.JSONDecodeError as exc:
                    if skipped is None:
                        raise ValueError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from exc
                    skipped.append(f"{path}:{lineno}: invalid JSON ({exc.msg})")
                    continue
                except ValueError as exc:
                    if skipped is None:
                        raise
                    skipped.append(str(exc))
                    continue
                yield lineno, row


def read_jsonl_problems(path: str | Path, *, integer_only: bool = True) -> tuple[list[Problem], list[str]]:
    """The readable problems of a JSONL (or ``.jsonl.gz``) file and why each other row was left out: the
    lenient reading of :func:`load_jsonl_problems` (invalid JSON, no problem or answer, a non-integer answer
    with ``integer_only``, a repeated id).

    Returns:
        ``(problems in file order, one reason per skipped row: "FILE:LINE: why")``.

    Raises:
        FileNotFoundError: no such file.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no problem file at {path}")
    stem = path.name.split(".")[0]
    out: list[Problem] = []
    skipped: list[str] = []
    seen: set[str] = set()
    for lineno, row in _read_jsonl(path, skipped):
        row.setdefault("id", f"{stem}-{lineno}")
        try:
            prob = _from_row(row, f"{path}:{lineno}", integer_only)
            if prob.id in seen:
                raise ValueError(f"{path}:{lineno}: duplicate id {prob.id!r}")
        except ValueError as exc:
            skipped.append(str(exc))
            continue
        seen.add(prob.id)
        out.append(prob)
    return out, skipped


def load_jsonl_problems(path: str | Path, *, integer_only: bool = True, skip_invalid: bool = False) -> list[Problem]:
    """Problems from a JSONL (or ``.jsonl.gz``) file with ``problem`` and ``answer`` (``id``, ``source`` optional).

    Args:
        path: the file.
        integer_only: reject rows whose answer is not an integer (thousands separators are removed).
        skip_invalid: drop invalid rows instead of raising (:func:`read_jsonl_problems` also says which).

    Returns:
        The problems in file order; a missing ``id`` becomes ``<file stem>-<line>``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: invalid JSON, a row without problem/answer, a non-integer answer with ``integer_only``, or
            duplicate ids (unless ``skip_invalid``): the first such row.
    """
    problems, skipped = read_jsonl_problems(path, integer_only=integer_only)
    if skipped and not skip_invalid:
        raise ValueError(skipped[0])
    return problems


def load_rl_set(name: str, limit: int | None = None) -> list[Problem]:
    """A packaged RL set by name (:data:`RL_SETS`), in file order, optionally the first ``limit`` rows.

    Raises:
        KeyError: unknown name (the message lists the known ones).
    """
    if name not in RL_SETS:
        raise KeyError(f"unknown RL set {name!r}; known: {', '.join(sorted(RL_SETS))}")
    problems = load_jsonl_problems(RL_DATA_DIR / RL_SETS[name]["file"])
    return problems[:limit] if limit is not None else problems


# --------------------------------------------------------------------------------------------------------------
# synthetic problems


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    r = math.isqrt(n)
    return all(n % d for d in range(3, r + 1, 2))


def _prime_count(limit: int) -> int:
    """Primes strictly below ``limit`` (sieve)."""
    if limit < 3:
        return 0
    sieve = bytearray([1]) * limit
    sieve[0:2] = b"\x00\x00"
    for p in range(2, math.isqrt(limit - 1) + 1):
        if sieve[p]:
            sieve[p * p :: p] = bytearray(len(range(p * p, limit, p)))
    return sum(sieve)


def _num_divisors(n: int) -> int:
    count, d = 1, 2
    while d * d <= n:
        e = 0
        while n % d == 0:
            n //= d
            e += 1
        count *= e + 1
        d += 1
    return count * (2 if n > 1 else 1)


def _gen_multiply(r: random.Random) -> tuple[str, int]:
    a, b = r.randint(10**4, 10**6), r.randint(10**4, 10**6)
    return f"Compute {a} \\times {b}.", a * b


def _gen_modpow(r: random.Random) -> tuple[str, int]:
    base, exp = r.randint(3, 999), r.randint(100, 99999)
    mod = r.choice([p for p in range(1000, 1200) if _is_prime(p)])
    return f"What is the remainder when ${base}^{{{exp}}}$ is divided by ${mod}$?", pow(base, exp, mod)


def _gen_digit_sum_power(r: random.Random) -> tuple[str, int]:
    base, exp = r.choice([2, 3, 7, 11]), r.randint(60, 400)
    return f"What is the sum of the digits of ${base}^{{{exp}}}$?", sum(map(int, str(base**exp)))


def _gen_prime_count(r: random.Random) -> tuple[str, int]:
    limit = r.randint(1000, 50000)
    return f"How many prime numbers are less than ${limit}$?", _prime_count(limit)


def _gen_divisor_count(r: random.Random) -> tuple[str, int]:
    n = r.randint(10**5, 10**7)
    return f"How many positive divisors does ${n}$ have?", _num_divisors(n)


def _gen_sum_of_powers(r: random.Random) -> tuple[str, int]:
    n, k = r.randint(100, 2000), r.choice([2, 3])
    word = {2: "squares", 3: "cubes"}[k]
    return f"What is the sum of the {word} of the integers from $1$ to ${n}$?", sum(i**k for i in range(1, n + 1))


def _gen_inclusion_exclusion(r: random.Random) -> tuple[str, int]:
    n = r.randint(10**4, 10**6)
    a, b = r.sample([3, 4, 6, 7, 9, 11, 13], 2)
    count = n // a + n // b - 2 * (n // math.lcm(a, b))
    return (
        f"How many integers from $1$ to ${n}$ are divisible by exactly one of ${a}$ and ${b}$?",
        count,
    )


def _gen_add_big(r: random.Random) -> tuple[str, int]:
    a, b, c, d = (r.randint(10**4, 10**6) for _ in range(4))
    return f"Compute ${a} + {b} - {c} + {d}$.", a + b - c + d


def _gen_gcd(r: random.Random) -> tuple[str, int]:
    g = r.randint(12, 999)
    a, b = g * r.randint(100, 9999), g * r.randint(100, 9999)
    return f"What is the greatest common divisor of ${a}$ and ${b}$?", math.gcd(a, b)


def _gen_count_digit(r: random.Random) -> tuple[str, int]:
    n, d = r.randint(500, 20000), r.randint(1, 9)
    count = sum(str(i).count(str(d)) for i in range(1, n + 1))
    return f"How many times does the digit ${d}$ appear when all the integers from $1$ to ${n}$ are written out?", count


def _gen_multiply_small(r: random.Random) -> tuple[str, int]:
    a, b = r.randint(12, 99), r.randint(12, 99)
    return f"What is ${a} \\times {b}$?", a * b


def _gen_add3(r: random.Random) -> tuple[str, int]:
    a, b, c = r.randint(100, 999), r.randint(100, 999), r.randint(10, 99)
    return f"What is ${a} + {b} - {c}$?", a + b - c


SYNTHETIC_KINDS: dict[str, Callable[[random.Random], tuple[str, int]]] = {
    "multiply": _gen_multiply,
    "modpow": _gen_modpow,
    "digit_sum_power": _gen_digit_sum_power,
    "prime_count": _gen_prime_count,
    "divisor_count": _gen_divisor_count,
    "sum_of_powers": _gen_sum_of_powers,
    "inclusion_exclusion": _gen_inclusion_exclusion,
    "add_big": _gen_add_big,
    "gcd": _gen_gcd,
    "count_digit": _gen_count_digit,
    "multiply_small": _gen_multiply_small,
    "add3": _gen_add3,
}
"""Synthetic problem kinds: name -> generator returning (problem text, exact integer answer).

The first ten need code to be reliable (``add_big``: four 5-7 digit terms; ``gcd`` of two numbers up to
eight digits; ``count_digit``: occurrences of a digit in 1..N); ``multiply_small`` (two-digit products) and ``add3``
(three-term sums) are within reach of a small model without the tool, which gives a small policy some reward to learn
from.
"""

HARD_SYNTHETIC_KINDS = (
    "multiply",
    "modpow",
    "digit_sum_power",
    "prime_count",
    "divisor_count",
    "sum_of_powers",
    "inclusion_exclusion",
)
"""The default kinds of :func:`synthetic_problems`: the ones where running code clearly helps."""


def synthetic_problems(n: int, seed: int = 0, kinds: Sequence[str] | None = None) -> list[Problem]:
    """``n`` generated problems with exact integer answers, cycling over ``kinds`` (default
    :data:`HARD_SYNTHETIC_KINDS`).

    The same ``(n, seed, kinds)`` always gives the same problems (ids ``synthetic-<kind>-<seed>-<i>``). Answers
    are computed exactly with Python integers; the problems are easy to solve with code and error-prone by hand.

    Raises:
        ValueError: ``n < 0`` or an unknown kind.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    chosen = list(kinds) if kinds else list(HARD_SYNTHETIC_KINDS)
    unknown = [k for k in chosen if k not in SYNTHETIC_KINDS]
    if unknown:
        raise ValueError(f"unknown synthetic kinds {unknown}; known: {', '.join(SYNTHETIC_KINDS)}")
    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind = chosen[i % len(chosen)]
        text, answer = SYNTHETIC_KINDS[kind](rng)
        out.append(
            Problem(
                id=f"synthetic-{kind}-{seed}-{i}",
                problem=text,
                answer=str(answer),
                source=f"tirl synthetic (seed {seed})",
                meta={"kind": kind},
            )
        )
    return out


# --------------------------------------------------------------------------------------------------------------
# mixtures


def load_training_problems(
    sources: Sequence[str], *, seed: int = 0, limit: int | None = None, shuffle: bool = True
) -> list[Problem]:
    """Problems from several sources, de-duplicated by id, optionally shuffled and capped.

    Args:
        sources: each a packaged set name (``gsm8k``, ``math``, ``aime``, ``champ``, ``curated``), optionally with a
            row cap (``gsm8k:200`` = the first 200 rows), ``synthetic:N`` (N generated problems, seeded with ``seed``),
            ``synthetic:N:kind1+kind2`` (only those kinds), ``toolmath:N`` (N generated problems of the
            toolmath task's kinds, :data:`tirl.data.toolmath.TOOLMATH_KINDS`), ``toolfix:N`` (the toolfix task,
            :mod:`tirl.data.toolfix`, without its held-out texts) or a path to a JSONL file.
            Generated problems whose
            text is in the held-out evaluation split (:func:`tirl.data.toolmath.heldout_texts`) are left out,
            so a synthetic source may yield a few fewer than N.
        seed: shuffling and synthetic seed.
        limit: keep at most this many after shuffling.
        shuffle: shuffle the mixture (deterministic for a seed).

    A file's rows that cannot be read as a problem with an integer answer (invalid JSON, no problem or answer,
    an answer such as ``\\sqrt{17}``, a repeated id) are left out, with one warning per file giving their count
    and the first (:func:`read_jsonl_problems`); the packaged sets are checked rows.

    Returns:
        The problems.

    Raises:
        ValueError: an empty source list, or a source that is neither a set, ``synthetic:N`` nor a file.
    """
    if not sources:
        raise ValueError("no training data sources given")
    problems: list[Problem] = []
    for src in sources:
        name, _, arg = src.partition(":")
        if name in ("synthetic", "toolmath"):
            from tirl.data.toolmath import TOOLMATH_KINDS, heldout_texts

            count, _, kinds = arg.partition(":")
            chosen = kinds.split("+") if kinds else (list(TOOLMATH_KINDS) if name == "toolmath" else None)
            reserved = heldout_texts()
            problems.extend(
                p for p in synthetic_problems(int(count or 100), seed=seed, kinds=chosen) if p.problem not in reserved
            )
        elif name == "toolfix":
            from tirl.data.toolfix import training_problems

            count, _, kinds = arg.partition(":")
            problems.extend(training_problems(int(count or 100), seed=seed, kinds=kinds.split("+") if kinds else None))
        elif name in RL_SETS:
            problems.extend(load_rl_set(name, int(arg) if arg else None))
        elif Path(src).exists():
            read, skipped = read_jsonl_problems(src)
            if skipped:  # one line per file, before training starts, never a stop in the middle of a run
                logger.warning(
                    "data source %s: skipped %d of %d rows that cannot be read as an integer-answer problem "
                    "(the first: %s)",
                    src,
                    len(skipped),
                    len(skipped) + len(read),
                    skipped[0],
                )
            problems.extend(read)
        else:
            raise ValueError(
                f"data source {src!r} is neither a packaged set ({', '.join(RL_SETS)}), 'synthetic:N', 'toolmath:N', "
                "'toolfix:N', "
                "nor an existing JSONL file"
            )
    seen: set[str] = set()
    unique = []
    for p in problems:
        if p.id not in seen:
            seen.add(p.id)
            unique.append(p)
    if shuffle:
        random.Random(seed).shuffle(unique)
    return unique[:limit] if limit is not None else unique


def filter_prompt_length(
    problems: Sequence[Problem], tokenizer: Any, max_tokens: int, protocol: Any = None
) -> list[Problem]:
    """Problems whose rendered prompt (system, tools, user, generation prompt; ``protocol``, a
    :class:`tirl.protocol.ProtocolConfig`, None for the default) has at most ``max_tokens`` tokens (an RL recipe's
    ``rollout.max_prompt_tokens``); how many were left out is logged (INFO)."""
    from tirl.protocol import render_prompt_ids

    kept = [p for p in problems if len(render_prompt_ids(tokenizer, p.problem, protocol)) <= max_tokens]
    if len(kept) < len(problems):
        logger.info("skipped %d problems with prompts over %d tokens", len(problems) - len(kept), max_tokens)
    return kept


def write_problems(problems: Iterable[Problem], path: str | Path) -> int:
    """Write problems as JSONL (``to_dict`` rows); returns the number written. Parent folders are created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        for p in problems:
            fh.write(json.dumps(p.to_dict(), ensure_ascii=False) + "\n")
            n += 1
    return n


__all__ = [
    "filter_prompt_length",
    "Problem",
    "RL_DATA_DIR",
    "RL_SETS",
    "HARD_SYNTHETIC_KINDS",
    "SYNTHETIC_KINDS",
    "load_jsonl_problems",
    "load_rl_set",
    "load_training_problems",
    "read_jsonl_problems",
    "synthetic_problems",
    "write_problems",
]
