"""Evaluation runs with scripted components: records, summary, resumption after a crash, error policy."""

from __future__ import annotations

import json

import pytest

from tirl.eval.runner import EvalComponents, EvalConfig, run_eval
from tirl.protocol.parse import render_tool_call
from tirl.rollout.agent_loop import AgentLoopSettings
from tirl.rollout.engine import GenerationOutput, SingleEngineRouter
from tirl.runs.evals import ResumeMismatch
from tirl.runs.layout import EVAL_TRAJECTORIES as TRAJECTORIES_FILE
from tirl.sandbox.types import ExecutionResult

PROBLEMS = {
    "toy": [
        {"id": "a", "problem": "ANSWER 3", "answer": "3"},
        {"id": "b", "problem": "ANSWER 4", "answer": "4"},
        {"id": "c", "problem": "ANSWER 5", "answer": "5"},
    ],
    "other": [{"id": "z", "problem": "ANSWER 9", "answer": "9"}],
}


class Crash(BaseException):
    """Simulates the process dying (not an Exception, so nothing in tirl swallows it)."""


class ProblemEngine:
    """Answers from the problem text in the prompt: sample j of a problem answers ``N`` when j is even, else
    ``N+1`` (so per-problem accuracy is known), after one tool call. Crashes on call number ``crash_at``."""

    def __init__(self, tok, crash_at=None):
        self.tok = tok
        self.calls = 0
        self.crash_at = crash_at
        self.stop = tok.convert_tokens_to_ids("<|im_end|>")

    async def generate(self, prompt_ids, params):
        self.calls += 1
        if self.crash_at is not None and self.calls >= self.crash_at:
            raise Crash()
        text = self.tok.decode(prompt_ids)
        n = int(text.split("ANSWER ")[-1].split("<")[0])
        wrong = (params.seed or 0) % 2  # seeds are per sample and turn; parity decides right or wrong
        if "<tool_response>" not in text.split("ANSWER")[-1]:
            out = render_tool_call(f"print({n})")
        else:
            out = f"done</reason><answer>\\boxed{{{n + wrong}}}</answer>"
        ids = self.tok.encode(out, add_special_tokens=False) + [self.stop]
        return GenerationOutput(ids, [-0.1] * len(ids))


class Executor:
    def __init__(self):
        self.n = 0

    async def run(self, request):
        return (await self.run_batch([request]))[0]

    async def run_batch(self, requests):
        self.n += len(requests)
        return [ExecutionResult(status="ok", stdout=f"{eval(r.code[6:-1])}\n") for r in requests]

    async def aclose(self):
        pass


async def verifier(traj, response_text, gold):
    return {
        "correct": traj.final_answer == gold,
        "status": "ok" if traj.final_answer else "no_answer",
        "extracted": traj.final_answer,
    }


def components(tok, engine, executor=None):
    return EvalComponents(
        router=SingleEngineRouter(engine),
        tokenizer=tok,
        executor=executor or Executor(),
        grader=verifier,
        load_problems=lambda name: PROBLEMS[name],
    )


def config(tmp_path, *, rollout=(), **kw):
    base = dict(
        model="scripted",
        benchmarks=["toy", "other"],
        out_dir=tmp_path / "out",
        samples=4,
        rollout=AgentLoopSettings(max_response_tokens=2000, max_turns=4, **dict(rollout)),
    )
    base.update(kw)
    return EvalConfig(**base)


QUIET: dict = {}  # the runner prints nothing: progress and tables belong to the command line's listener


async def test_the_runner_prints_nothing_and_reports_to_its_listener(tmp_path, smollm2_tokenizer, capsys):
    from tirl.eval.runner import EvalListener

    class Recorder(EvalListener):
        def __init__(self) -> None:
            self.events: list[tuple] = []

        def started(self, label, model, total, resumed, resumed_correct):  # noqa: ANN001, ANN201
            self.events.append(("started", total, resumed))

        def sample_done(self, correct):  # noqa: ANN001, ANN201
            self.events.append(("sample", correct))

        def finished(self, summaries, title):  # noqa: ANN001, ANN201
            self.events.append(("finished", [s.benchmark for s in summaries], "T=" in title))

        def close(self):  # noqa: ANN201
            self.events.append(("close",))

    tok = smollm2_tokenizer
    recorder = Recorder()
    result = await run_eval(config(tmp_path), components(tok, ProblemEngine(tok)), listener=recorder)
    assert capsys.readouterr().out == ""
    samples = [e for e in recorder.events if e[0] == "sample"]
    assert recorder.events[0] == ("started", 16, 0) and len(samples) == 16
    assert sum(bool(e[1]) for e in samples) == round(sum(s.avg_pass1 * s.num_samples for s in result.summaries))
    assert recorder.events[-2][0] == "finished" and recorder.events[-2][2] and recorder.events[-1] == ("close",)


async def test_run_writes_one_record_per_sample_and_a_summary(tmp_path, smollm2_tokenizer):
    tok = smollm2_tokenizer
    result = await run_eval(config(tmp_path), components(tok, ProblemEngine(tok)), **QUIET)
    lines = (tmp_path / "out" / TRAJECTORIES_FILE).read_text().splitlines()
    records = [json.loads(x) for x in lines]
    assert len(records) == 16 and result.new_samples == 16
    keys = {(r["benchmark"], r["problem_id"], r["sample_index"]) for r in records}
    assert len(keys) == 16
    r = records[0]
    assert r["num_turns"] == 2 and r["tool_classes"] == ["ok"] and r["finish_reason"] == "answer"
    assert "<tool_response>" in r["response_text"] and r["turns"][0]["tool_calls"][0]["result"]["status"] == "ok"
    assert r["correct"] == (r["final_answer"] == r["gold"])
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    toy = summary["benchmarks"]["toy"]
    expected = sum(x["correct"] for x in records if x["benchmark"] == "toy") / 12
    assert toy["avg_pass1"] == pytest.approx(expected)
    assert toy["tool_calls_per_trajectory"] == 1.0
    assert [s.benchmark for s in result.summaries] == ["toy", "other"]


async def test_records_store_the_exact_token_ids_and_loss_mask(tmp_path, smollm2_tokenizer):
    tok = smollm2_tokenizer
    await run_eval(config(tmp_path), components(tok, ProblemEngine(tok)), **QUIET)
    for line in (tmp_path / "out" / TRAJECTORIES_FILE).read_text().splitlines():
        r = json.loads(line)
        assert len(r["prompt_ids"]) == r["num_prompt_tokens"] and len(r["response_ids"]) == r["num_response_tokens"]
        assert len(r["loss_mask"]) == len(r["response_ids"]) and sum(r["loss_mask"]) == r["model_tokens"]
        assert tok.decode(r["prompt_ids"], skip_special_tokens=False) == r["prompt_text"]
        injected = tok.decode([t for t, m in zip(r["response_ids"], r["loss_mask"]) if m == 0])
        assert "<tool_response>" in injected  # the tool segment is the masked part


async def test_resume_after_crash_redoes_only_missing_samples_and_matches_an_uninterrupted_run(
    tmp_path, smollm2_tokenizer
):
    tok = smollm2_tokenizer
    reference = await run_eval(config(tmp_path, out_dir=tmp_path / "ref"), components(tok, ProblemEngine(tok)), **QUIET)

    crashing = ProblemEngine(tok, crash_at=15)
    with pytest.raises(Crash):
        await run_eval(config(tmp_path, rollout={"max_concurrency": 2}), components(tok, crashing), **QUIET)
    path = tmp_path / "out" / TRAJECTORIES_FILE
    done = len(path.read_text().splitlines())
    assert 0 < done < 16
    with open(path, "a") as fh:  # the crash also tore the line being written
        fh.write('{"benchmark": "toy", "problem_id": "a", "sample_in')

    engine = ProblemEngine(tok)
    result = await run_eval(config(tmp_path, rollout={"max_concurrency": 2}), components(tok, engine), **QUIET)
    assert result.resumed_samples == done and result.new_samples == 16 - done
    assert engine.calls == 2 * (16 - done)  # two turns per missing sample, none for finished ones
    records = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(records) == 16
    assert len({(r["benchmark"], r["problem_id"], r["sample_index"]) for r in records}) == 16
    # per-sample seeds make the resumed run equal to the uninterrupted one
    assert [s.to_dict() for s in result.summaries] == [s.to_dict() for s in reference.summaries]


async def test_rerun_of_a_finished_run_generates_nothing(tmp_path, smollm2_tokenizer):
    tok = smollm2_tokenizer
    await run_eval(config(tmp_path), components(tok, ProblemEngine(tok)), **QUIET)
    engine, executor = ProblemEngine(tok), Executor()
    result = await run_eval(config(tmp_path), components(tok, engine, executor), **QUIET)
    assert result.new_samples == 0 and result.resumed_samples == 16
    assert engine.calls == 0 and executor.n == 0  # not even the health check runs


async def test_more_samples_extend_a_run_and_summary_covers_only_what_was_asked(tmp_path, smollm2_tokenizer):
    tok = smollm2_tokenizer
    await run_eval(config(tmp_path, samples=2), components(tok, ProblemEngine(tok)), **QUIET)
    result = await run_eval(config(tmp_path, samples=4), components(tok, ProblemEngine(tok)), **QUIET)
    assert (result.resumed_samples, result.new_samples) == (8, 8)
    small = await run_eval(
        config(tmp_path, samples=2, subsets={"toy": 1}), components(tok, ProblemEngine(tok)), **QUIET
    )
    assert [(s.benchmark, s.num_samples) for s in small.summaries] == [("toy", 2), ("other", 2)]


async def test_different_settings_refuse_to_resume(tmp_path, smollm2_tokenizer):
    tok = smollm2_tokenizer
    await run_eval(config(tmp_path, samples=1), components(tok, ProblemEngine(tok)), **QUIET)
    with pytest.raises(ResumeMismatch, match="temperature"):
        await run_eval(
            config(tmp_path, samples=1, rollout={"temperature": 1.0}), components(tok, ProblemEngine(tok)), **QUIET
        )


async def test_engine_errors_are_not_stored_and_are_retried(tmp_path, smollm2_tokenizer):
    tok = smollm2_tokenizer

    class Failing(ProblemEngine):
        async def generate(self, prompt_ids, params):
            if "ANSWER 9" in self.tok.decode(prompt_ids):
                return GenerationOutput([], [], finish_reason="error", error="server gone")
            return await super().generate(prompt_ids, params)

    result = await run_eval(config(tmp_path), components(tok, Failing(tok)), **QUIET)
    assert result.engine_errors == 4 and result.new_samples == 12
    assert result.summary["missing_samples"] == 4
    assert [s.benchmark for s in result.summaries] == ["toy"]
    again = await run_eval(config(tmp_path), components(tok, ProblemEngine(tok)), **QUIET)
    assert again.new_samples == 4 and again.engine_errors == 0


async def test_verifier_exception_is_recorded_as_verifier_bug(tmp_path, smollm2_tokenizer):
    """A grader that raises gives the answer reward 0 with status ``verifier_bug`` (issue 41: the model's, not
    masked as ``verifier_error`` is), and the run goes on."""
    tok = smollm2_tokenizer
    comps = components(tok, ProblemEngine(tok))

    async def broken(traj, text, gold):
        raise RuntimeError("verifier bug")

    comps.grader = broken
    result = await run_eval(config(tmp_path, benchmarks=["other"], samples=2), comps, **QUIET)
    assert result.summaries[0].verdict_statuses == {"verifier_bug": 2}
    assert result.summaries[0].avg_pass1 == 0.0


async def test_no_tools_run_never_touches_the_executor(tmp_path, smollm2_tokenizer):
    tok = smollm2_tokenizer
    executor = Executor()
    comps = components(tok, ProblemEngine(tok), executor)
    comps.executor = None
    result = await run_eval(config(tmp_path, use_tools=False, benchmarks=["other"], samples=2), comps, **QUIET)
    assert executor.n == 0
    assert result.summaries[0].tool_calls_per_trajectory == 0.0
    rec = json.loads((tmp_path / "out" / TRAJECTORIES_FILE).read_text().splitlines()[0])
    assert "<tools>" not in rec["prompt_text"]


def test_eval_protocol_reaches_the_agent_loop_and_the_resume_record(tmp_path):
    from tirl.eval.runner import EvalConfig
    from tirl.protocol import ProtocolConfig

    plain = EvalConfig(model="m", benchmarks=["toolmath"], out_dir=tmp_path)
    compact = EvalConfig(
        model="m", benchmarks=["toolmath"], out_dir=tmp_path, protocol=ProtocolConfig(prompt_style="compact")
    )
    assert compact.loop_config(None).protocol.prompt_style == "compact"
    assert "protocol" not in plain.resume_settings()  # folders written before the field still resume
    assert compact.resume_settings()["protocol"]["prompt_style"] == "compact"


async def test_rerun_of_a_finished_run_loads_no_model(tmp_path, smollm2_tokenizer, monkeypatch):
    """`tirl eval` re-run on a finished folder builds no engine: only the reference check and the summary."""
    import tirl.eval.runner as runner

    tok = smollm2_tokenizer
    first = await run_eval(config(tmp_path), components(tok, ProblemEngine(tok)), **QUIET)
    built: list[str] = []

    async def no_model(cfg):  # noqa: ANN001, ANN202 - the model, tokenizer and engine loader
        built.append("model")
        raise AssertionError("a fully stored run loaded the model")

    real_grading = runner.build_components_to_grade

    async def grading(cfg):  # noqa: ANN001, ANN202
        built.append("grading")
        return await real_grading(cfg)

    monkeypatch.setattr(runner, "build_components", no_model)
    monkeypatch.setattr(runner, "build_components_to_grade", grading)
    monkeypatch.setattr(runner, "default_load_problems", lambda name: PROBLEMS[name])
    assert runner.all_samples_stored(config(tmp_path))  # what tirl eval asks before starting a server
    assert not runner.all_samples_stored(config(tmp_path, samples=5))
    again = await run_eval(config(tmp_path))
    assert built == ["grading"]
    assert again.new_samples == 0 and again.resumed_samples == 16 and again.engine_errors == 0
    assert [s.to_dict() for s in again.summaries] == [s.to_dict() for s in first.summaries]
    # one sample missing: the model is needed again
    lines = (tmp_path / "out" / TRAJECTORIES_FILE).read_text().splitlines()
    (tmp_path / "out" / TRAJECTORIES_FILE).write_text("\n".join(lines[:-1]) + "\n")
    assert not runner.all_samples_stored(config(tmp_path))
    with pytest.raises(AssertionError, match="loaded the model"):
        await run_eval(config(tmp_path))
    assert built == ["grading", "model"]
