"""The generated recovery SFT conversations (``programs_recovery:N``): a failing call whose error is the one the
sandbox returns, the error read, a fix that prints the answer; deterministic, and never a toolfix kind."""

from __future__ import annotations

import asyncio
import re

import pytest

from tirl.data import toolfix
from tirl.data.sft import load_sft_examples, render_sft_example
from tirl.data.sft_recovery import (
    INT_STR_LIMIT,
    RECOVERY_FAMILIES,
    SEED,
    first_result,
    recovery_examples,
    run_like_sandbox,
)
from tirl.protocol import ProtocolConfig, extract_answer, parse_tool_calls
from tirl.protocol.response import render_tool_response
from tirl.protocol.types import ToolCall
from tirl.sandbox.types import ExecutionResult

CFG = ProtocolConfig(prompt_style="compact")
N_FAMILIES = len(RECOVERY_FAMILIES)
LIMIT_ERROR = (
    "ValueError: Exceeds the limit (4300 digits) for integer string conversion; use "
    "sys.set_int_max_str_digits() to increase the limit"
)


def _codes(example) -> list[str]:
    return [
        c.arguments["code"] for t in example.turns for c in parse_tool_calls(t.text, CFG) if isinstance(c, ToolCall)
    ]


def _family(example) -> str:
    return example.source.split(" (")[1].split(",")[0]


def test_rows_are_deterministic_prefix_stable_and_cover_every_family():
    a = recovery_examples(2 * N_FAMILIES, config=CFG)
    b = recovery_examples(N_FAMILIES, config=CFG)
    again = recovery_examples(2 * N_FAMILIES, config=CFG)
    assert [(e.problem, e.turns, e.answer) for e in a] == [(e.problem, e.turns, e.answer) for e in again]
    assert [(e.problem, e.answer) for e in a[:N_FAMILIES]] == [(e.problem, e.answer) for e in b]
    assert len({e.id for e in a}) == len(a) and a[0].id == f"recovery-{SEED}-0"
    assert {_family(e) for e in a} == set(RECOVERY_FAMILIES)
    other = recovery_examples(N_FAMILIES, seed=SEED + 1, config=CFG)
    assert [e.problem for e in other] != [e.problem for e in b]


def test_each_row_fails_reads_the_error_fixes_it_and_answers_what_the_fix_printed():
    for e in recovery_examples(3 * N_FAMILIES, config=CFG):
        first, second, last = e.turns
        assert len(first.tool_responses) == len(second.tool_responses) == 1 and not last.tool_responses
        failing, fixed = _codes(e)
        assert failing != fixed
        error = first.tool_responses[0]
        assert error.startswith(("Traceback (most recent call last):", '  File "<code>"', "TimeoutError: "))
        assert e.answer not in error
        # the sentence before the second call reads the error
        reading = second.text.split("<tool_call>")[0]
        assert re.search(r"4300|not defined|import math|syntax|divided by zero|% 0|time", reading), reading
        assert second.tool_responses[0] == e.answer and e.answer.isdigit()
        assert extract_answer(last.text, CFG) == e.answer


def test_the_errors_are_real_and_the_limit_error_dominates():
    rows = recovery_examples(N_FAMILIES * 8, config=CFG)  # the recipe's 88
    kinds = [e.source.split(", ")[1] for e in rows]
    assert kinds.count("ValueError") >= len(rows) // 3  # the toolfix task's error
    assert {"ValueError", "NameError", "SyntaxError", "ZeroDivisionError", "timeout"} == set(kinds)
    for e, kind in zip(rows, kinds):
        error = e.turns[0].tool_responses[0]
        if kind == "ValueError":
            assert error.endswith(LIMIT_ERROR)
        elif kind == "timeout":
            assert error == "TimeoutError: the code did not finish within the time limit (5.0 s) and was stopped."
        else:
            assert error.splitlines()[-1].startswith(f"{kind}: ")


def test_run_like_sandbox_restores_the_digit_limit_and_reports_errors():
    import sys

    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # a lifted limit in this process must not hide the error
    try:
        r = run_like_sandbox("x = 10 ** 5000\nprint(len(str(x)))")
        assert r.status == "error" and r.error_type == "ValueError" and r.traceback.endswith(LIMIT_ERROR + "\n")
        assert sys.get_int_max_str_digits() == 0
        ok = run_like_sandbox("import sys\nsys.set_int_max_str_digits(0)\nprint(len(str(10 ** 5000)))")
        assert ok.status == "ok" and ok.stdout == "5001\n" and sys.get_int_max_str_digits() == 0
    finally:
        sys.set_int_max_str_digits(old)
    printed = run_like_sandbox("print(1)\nprint(1 / 0)")
    assert printed.status == "error" and printed.stdout == "1\n" and printed.exit_code == 1
    assert INT_STR_LIMIT == 4300


def test_a_template_that_does_not_fail_is_refused():
    rec = RECOVERY_FAMILIES["lcm_range"](__import__("random").Random(0))
    broken = type(rec)(rec.problem, "import math\n" + rec.first, rec.error, rec.reading, rec.fix)
    with pytest.raises(RuntimeError, match="expected NameError"):
        first_result(broken)


def test_no_row_is_a_toolfix_kind_or_a_toolfix_problem():
    rows = recovery_examples(N_FAMILIES * 10, config=CFG)
    assert not set(RECOVERY_FAMILIES) & set(toolfix.TOOLFIX_KINDS)
    # toolfix's question shapes: digits of b^e (sum, a digit's count, first six) and of n! (sum, non-zero,
    # trailing zeros)
    toolfix_shapes = [
        r"digits of \$\d+\^\{\d+\}\$\?",  # digit sum of a power
        r"appear in the decimal representation of \$\d+\^",  # digit count of a power
        r"first six digits",
        r"digits of \$\d+!\$",  # digit sum / non-zero digits of n!
        r"zeros does \$\d+!\$ end with",
    ]
    for shape in toolfix_shapes:  # the shapes do match toolfix's own problems
        assert any(re.search(shape, p.problem) for p in toolfix.heldout_problems()), shape
    held = toolfix.heldout_texts()
    for e in rows:
        assert e.problem not in held
        assert not any(re.search(shape, e.problem) for shape in toolfix_shapes), e.problem
        for base in (2, 3, 7, 11, 13):  # no power of a toolfix base
            assert not re.search(rf"(?<!\d){base}\^\{{", e.problem), e.problem


def test_the_timeout_families_formula_is_what_the_brute_force_computes():
    rng = __import__("random").Random(5)
    for name in ("sum_of_squares", "multiples_count"):
        rec = RECOVERY_FAMILIES[name](rng)
        n = re.search(r"n = (\d+)", rec.fix).group(1)
        small = "12345"
        brute = run_like_sandbox(rec.first.replace(n, small))
        formula = run_like_sandbox(rec.fix.replace(n, small))
        assert brute.status == formula.status == "ok" and brute.stdout == formula.stdout
        assert int(n) >= 10**10  # ~10^10 loop iterations: hours, far past any tool time limit


def test_sources_and_rendering_mask_the_tool_responses(qwen_tokenizer):
    examples = load_sft_examples(["programs_recovery:3-9", "oasst:2"], shuffle=False, config=CFG)
    assert [e.id for e in examples[:6]] == [f"recovery-{SEED}-{i}" for i in range(3, 9)]
    with pytest.raises(ValueError, match="needs a size"):
        load_sft_examples(["programs_recovery"], config=CFG)
    for e in recovery_examples(N_FAMILIES * 8, config=CFG):
        rendered = render_sft_example(qwen_tokenizer, e, CFG)
        assert len(rendered.input_ids) <= 600  # the recipe's max_length: no row is dropped
        trained = qwen_tokenizer.decode([t for t, m in zip(rendered.response_ids, rendered.loss_mask) if m])
        masked = qwen_tokenizer.decode([t for t, m in zip(rendered.response_ids, rendered.loss_mask) if not m])
        error_line = e.turns[0].tool_responses[0].splitlines()[-1]
        assert error_line in masked and error_line not in trained  # the error is read, never trained on
        assert e.answer in trained  # the answer is
        assert _codes(e)[1].splitlines()[0] in trained  # so is the fix


@pytest.mark.slow
def test_the_tool_responses_are_what_the_sandbox_returns():
    from tirl.sandbox import ExecutionRequest, LocalSandbox

    examples = recovery_examples(N_FAMILIES, config=CFG)  # one of each family
    requests = []
    for e in examples:
        failing, fixed = _codes(e)
        timeout = 1.0 if "timeout" in e.source else 30.0  # the brute force: stopped after 1 s instead of 5 s
        requests += [ExecutionRequest(failing, timeout_s=timeout), ExecutionRequest(fixed, timeout_s=30.0)]

    async def run() -> list:
        async with LocalSandbox(workers=2) as sandbox:
            return await sandbox.run_batch(requests)

    results = asyncio.run(run())
    for i, e in enumerate(examples):
        failed, fixed = results[2 * i], results[2 * i + 1]
        assert render_tool_response(fixed, CFG) == e.turns[1].tool_responses[0], e.problem
        if "timeout" in e.source:
            assert failed.status == "timeout" and not failed.stdout, e.problem
            # the row's text is the sandbox's rendering of a call stopped at the 5 s limit
            assert render_tool_response(ExecutionResult("timeout", duration_s=5.0), CFG) == e.turns[0].tool_responses[0]
            assert render_tool_response(failed, CFG) == e.turns[0].tool_responses[0].replace(
                "(5.0 s)", f"({failed.duration_s:.1f} s)"
            )
        else:
            assert failed.status == "error", (e.problem, failed.status)
            assert render_tool_response(failed, CFG) == e.turns[0].tool_responses[0], e.problem


def test_the_recovery_recipe_is_the_base_recipe_plus_the_recovery_rows():
    from pathlib import Path

    from tirl.config import load_dataclass_config
    from tirl.train.sft_config import SFTConfig

    configs = Path(__file__).resolve().parents[1] / "configs" / "sft"
    base = load_dataclass_config(SFTConfig, configs / "cpu-qwen0.5b.yaml")
    rec = load_dataclass_config(SFTConfig, configs / "cpu-qwen0.5b-recovery.yaml")
    assert [s for s in rec.data.sources if not s.startswith("programs_recovery:")] == base.data.sources
    assert "programs_recovery:88" in rec.data.sources
    assert rec.output_dir != base.output_dir and rec.model == base.model and rec.optim == base.optim
    assert rec.protocol == base.protocol and rec.data.max_length == base.data.max_length
