"""How ``tirl eval`` grades: unparsable references counted per benchmark, the opt-in answer fallback, the
question passed to the verifier (subscript bases). Scripted engine, the real ``tirl.reward`` verifier."""

from __future__ import annotations

import io
import json

from rich.console import Console

from tirl.cli.eval_display import ConsoleListener
from tirl.eval.components import make_gold_checker, make_grader
from tirl.eval.runner import EvalComponents, EvalConfig, outcome_from_record, run_eval
from tirl.protocol.answer import extract_answer_fallback
from tirl.protocol.types import Trajectory
from tirl.rollout.agent_loop import AgentLoopSettings
from tirl.rollout.engine import GenerationOutput, SingleEngineRouter

PROBLEMS = {
    "toy": [
        {"id": "a", "problem": "ANSWER 3", "answer": "3"},
        {"id": "b", "problem": "ANSWER 4", "answer": "2 3"},  # not one number: unparsable
        {"id": "c", "problem": "ANSWER 5", "answer": "5"},
        {"id": "d", "problem": "ANSWER 6", "answer": "\\operatorname{e}"},  # parses since issue 14
    ],
}


class PlainTextEngine:
    """Answers ``N`` from the problem text: boxed in even samples, in plain text ("The final answer is $N$.")
    in odd ones (a model that does not box)."""

    def __init__(self, tok):
        self.tok = tok
        self.stop = tok.convert_tokens_to_ids("<|im_end|>")

    async def generate(self, prompt_ids, params):
        text = self.tok.decode(prompt_ids)
        n = int(text.split("ANSWER ")[-1].split("<")[0])
        if (params.seed or 0) % 2:
            out = f"I computed it.</reason> The final answer is ${n}$."
        else:
            out = f"done</reason><answer>\\boxed{{{n}}}</answer>"
        ids = self.tok.encode(out, add_special_tokens=False) + [self.stop]
        return GenerationOutput(ids, [-0.1] * len(ids))


def components(tok, *, fallback: bool, check: bool = True) -> EvalComponents:
    # Integer answers never reach the symbolic path, so no executor is needed for the verdicts; the reference
    # check uses the shared default sandbox for the non-integer references.
    return EvalComponents(
        router=SingleEngineRouter(PlainTextEngine(tok)),
        tokenizer=tok,
        executor=None,
        grader=make_grader(None, answer_fallback=fallback),
        check_golds=make_gold_checker(None) if check else None,
        load_problems=lambda name: PROBLEMS[name],
    )


def config(tmp_path, name, **kw):
    return EvalConfig(
        model="scripted",
        benchmarks=["toy"],
        out_dir=tmp_path / name,
        samples=4,
        rollout=AgentLoopSettings(max_response_tokens=500, max_turns=2),
        use_tools=False,
        **kw,
    )


async def run(tmp_path, tok, name, *, fallback: bool, check: bool = True):
    out = io.StringIO()
    result = await run_eval(
        config(tmp_path, name, answer_fallback=fallback),
        components(tok, fallback=fallback, check=check),
        listener=ConsoleListener(Console(file=out, width=200), progress=False),
    )
    summary = json.loads((tmp_path / name / "summary.json").read_text())["benchmarks"]["toy"]
    return result, summary, out.getvalue()


async def test_unparsable_references_are_counted_per_benchmark_and_printed(tmp_path, smollm2_tokenizer):
    _, summary, printed = await run(tmp_path, smollm2_tokenizer, "plain", fallback=False)
    assert summary["unparsable_gold_problems"] == 1 and summary["unparsable_gold_ids"] == ["b"]
    row = next(line for line in printed.splitlines() if "unparsable gold (problems)" in line)
    assert [cell.strip() for cell in row.replace("│", "|").split("|") if cell.strip()][-1] == "1"
    assert "toy: 1 reference answer(s) cannot be parsed" in printed
    assert "answers by fallback" not in printed  # the fallback was off


async def test_unparsable_references_are_found_through_verdicts_without_the_check(tmp_path, smollm2_tokenizer):
    _, summary, _ = await run(tmp_path, smollm2_tokenizer, "nocheck", fallback=False, check=False)
    # "2 3" against the boxed 4: the verdict says unparsable_gold; the plain-text samples never compared
    assert summary["unparsable_gold_ids"] == ["b"]


async def test_answer_fallback_is_off_by_default_and_counts_what_it_supplied(tmp_path, smollm2_tokenizer):
    tok = smollm2_tokenizer
    _, off, _ = await run(tmp_path, tok, "off", fallback=False)
    _, on, printed = await run(tmp_path, tok, "on", fallback=True)
    off_records = [json.loads(x) for x in (tmp_path / "off" / "trajectories.jsonl").read_text().splitlines()]
    plain = sum(r["final_answer"] is None for r in off_records)  # samples that did not box (seed parity)
    assert 0 < plain < 16
    assert off["fallback_answers"] is None
    assert off["no_answer_rate"] == plain / 16
    assert on["fallback_answers"] == plain and on["no_answer_rate"] == 0.0
    # the plain-text answers are right (except against the unparsable reference), so accuracy rises
    assert on["avg_pass1"] > off["avg_pass1"]
    assert on["verdict_statuses"].get("no_answer", 0) == 0
    row = next(line for line in printed.splitlines() if "answers by fallback" in line)
    assert str(plain) in row
    records = [json.loads(x) for x in (tmp_path / "on" / "trajectories.jsonl").read_text().splitlines()]
    fallback = [r for r in records if r["verdict"].get("answer_source") == "fallback"]
    assert len(fallback) == plain and all(outcome_from_record(r).answer_source == "fallback" for r in fallback)
    assert all(outcome_from_record(r).answer == r["verdict"]["extracted"] for r in fallback)


async def test_the_fallback_setting_is_part_of_what_a_resume_must_share(tmp_path, smollm2_tokenizer):
    assert "answer_fallback" not in config(tmp_path, "x").resume_settings()  # old folders still resume
    assert config(tmp_path, "x", answer_fallback=True).resume_settings()["answer_fallback"] is True


async def test_the_question_reaches_the_verifier() -> None:
    verify = make_grader(None)

    def answered(answer: str, problem: str) -> Trajectory:
        traj = Trajectory(prompt_ids=[1], final_answer=answer)
        traj.metadata["problem"] = problem
        return traj

    in_base = "Convert $83$ to base 8. Express your answer in base 8."
    assert (await verify(answered("123", in_base), "", "123_8"))["correct"] is True
    assert (await verify(answered("83", in_base), "", "123_8"))["correct"] is False
    assert (await verify(answered("123", "What is 83 written differently?"), "", "123_8"))["correct"] is False


async def test_the_grader_reads_the_final_answer_not_the_response_text() -> None:
    """The response text holds tool output: the grader grades what the agent loop extracted from the model's
    turns (the answer maj@k votes on), never a box that only the text has."""
    verify = make_grader(None)
    text = "<tool_response>\n</tool_response>\n<answer>\\boxed{7}</answer>\n</tool_response>"
    verdict = await verify(Trajectory(prompt_ids=[1], final_answer=None), text, "7")
    assert verdict["status"] == "no_answer" and verdict["correct"] is False
    assert (await verify(Trajectory(prompt_ids=[1], final_answer="7"), "", "7"))["correct"] is True


def test_extract_answer_fallback_forms() -> None:
    cases = {
        "The final answer is $10$.": "10",
        "So the answer is 42.": "42",
        "Final Answer: **7**": "7",
        "Final Answer:\nThe last three digits are:\n\\[Answer: 009\\]": "009",
        "2+40=42\n#### 42": "42",
        "The answer is \\(\\frac{1}{2}\\). Done.": "\\frac{1}{2}",
        "the answer is $$\\frac{3}{4}$$": "\\frac{3}{4}",
        "First the answer is 3. No wait, the answer is 5.": "5",
        "I do not know.": None,
        "<think>the answer is 3</think> no idea": None,
        "<tool_response>the answer is 3</tool_response> hmm": None,
    }
    for text, expected in cases.items():
        assert extract_answer_fallback(text) == expected, text


async def test_the_reference_check_names_each_unparsable_reference() -> None:
    reasons = await make_gold_checker(None)(
        ["5", "}{", "2 3", "\\operatorname{e}", "", "129_8", "\\frac{0}{0}", "(-\\infty, 3)"]
    )
    assert [r is None for r in reasons] == [True, False, False, True, False, False, False, True]
    assert "separated" in reasons[2] and "base-8" in reasons[5] and "finite" in reasons[6]


def test_the_cli_flag_turns_the_fallback_on_and_it_is_off_without_it(tmp_path, monkeypatch) -> None:
    from typer.testing import CliRunner

    import tirl.cli.eval as cli_eval
    from tirl.cli.main import app

    seen = []

    class Result:
        new_samples = resumed_samples = 0
        elapsed_s = 0.0

    monkeypatch.setattr(cli_eval, "_run", lambda config, console, progress=True: seen.append(config) or Result())
    runner = CliRunner()
    for extra in ([], ["--answer-fallback"]):
        res = runner.invoke(
            app, ["eval", "--model", "m", "--benchmarks", "aime25:1", "--out-dir", str(tmp_path / "o"), *extra]
        )
        assert res.exit_code == 0, res.output
    assert [c.answer_fallback for c in seen] == [False, True]


async def test_one_verifier_grades_and_checks_the_references_of_a_run(tmp_path, tiny_model_dir, monkeypatch):
    """Issue 44: an evaluation builds one Verifier (one set of counters, one configuration) for grading and for the
    reference check, not one each."""
    import tirl.runtime
    from tirl.eval.components import build_default_components
    from tirl.eval.config import EvalConfig

    built = []
    original = tirl.runtime.build_verifier

    def counting(*args, **kwargs):
        built.append(original(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(tirl.runtime, "build_verifier", counting)
    config = EvalConfig(model=str(tiny_model_dir), benchmarks=["gsm8k"], out_dir=tmp_path, use_tools=False)
    components = await build_default_components(config)
    try:
        assert len(built) == 1
        assert components.grader.verifier is components.check_golds.verifier is built[0]
    finally:
        for close in components.closers:
            result = close()
            if hasattr(result, "__await__"):
                await result
