"""Benchmark evaluation runs: sample K trajectories per problem, verify them, store them, return the summaries.

Covers :func:`run_eval` (the run: resume from the output folder, generate the missing samples through the agent
loop, verify each as it finishes, append it durably, then summarize; progress and results are reported to an
:class:`EvalListener`, displayed by the command line, not here), and
:func:`build_components` (model, engine, sandbox and verifier from the config). It does not define the options
(:class:`tirl.eval.config.EvalConfig`, re-exported here) or implement the agent loop
(``tirl.rollout.agent_loop``), metrics (``tirl.eval.metrics``) or the output format's durability
(``tirl.runs.evals``).

Policies:

- Sample ``j`` of problem ``p`` of benchmark ``b`` is sampled with seed ``derive_seed(seed, b, p, j)``, so a
  resumed run draws the samples an uninterrupted one would have drawn (as far as the engine is deterministic
  under a seed).
- A trajectory whose engine failed (finish reason ``error``) is not stored: it is counted in the summary's
  ``engine_errors`` and re-tried by the next run with the same ``--out-dir``.
- An output folder whose earlier run stored no sample is taken over (:class:`tirl.runs.evals.RunStore`), with a
  warning naming the settings that changed.
- A verifier status other than ``ok`` / ``no_answer`` counts as incorrect and is reported in the table's JSON
  (``verdict_statuses``), never hidden.
- The summary covers exactly the samples this run asked for (benchmarks x subset x samples), also when the
  output folder holds more from an earlier, larger run.
- A run with every sample already stored loads no model, tokenizer or engine (:func:`build_components_to_grade`):
  it checks the references and writes and reports the summary.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tirl.eval.components import EvalComponents, Grader, build_default_components, build_grading_components
from tirl.eval.config import EvalConfig
from tirl.eval.metrics import BenchmarkSummary, SampleOutcome, summarize
from tirl.protocol.audit import AUDIT_KEYS, audit_record, summarize_audits
from tirl.protocol.types import Trajectory, token_fields
from tirl.reward.types import bug_detail
from tirl.rollout.agent_loop import AgentLoop, RolloutRequest, derive_seed
from tirl.runs.evals import RunStore, describe_diff


@dataclass
class EvalResult:
    """What :func:`run_eval` returns.

    Attributes:
        summaries: one per benchmark, in the order of ``config.benchmarks``.
        summary: the JSON written to ``summary.json``.
        new_samples: trajectories generated and stored by this run.
        resumed_samples: samples found already finished in the output folder.
        engine_errors: trajectories that failed in the engine (not stored; a re-run retries them).
        elapsed_s: wall-clock seconds of the run.
    """

    summaries: list[BenchmarkSummary]
    summary: dict[str, Any]
    new_samples: int
    resumed_samples: int
    engine_errors: int
    elapsed_s: float


def default_load_problems(name: str) -> list[dict[str, Any]]:
    """Problems of a benchmark as dicts with ``id``, ``problem``, ``answer`` (``tirl.data.load_benchmark``)."""
    from tirl.data.benchmarks import load_benchmark

    return [{"id": p.id, "problem": p.problem, "answer": p.answer} for p in load_benchmark(name)]


def trajectory_record(
    traj: Trajectory, tokenizer: Any, verdict: dict[str, Any], response_text: str, **keys: Any
) -> dict[str, Any]:
    """The JSONL line of one evaluated trajectory: keys, verdict, texts, per-turn tool calls and results.

    ``keys`` (benchmark, problem_id, sample_index, ...) come first. The exact token ids (``prompt_ids``,
    ``response_ids``) and the loss mask (``loss_mask``, 1 = model token, 0 = injected) are stored as plain
    lists so that ``tirl analyze entropy`` can re-score the very tokens sampled (no re-tokenisation);
    log-probs are not stored. Records written before these fields existed simply lack them.
    """
    turns = [dataclasses.asdict(t) for t in traj.turns]
    return {
        **keys,
        "correct": bool(verdict.get("correct", False)),
        "verdict": verdict,
        "final_answer": traj.final_answer,
        "finish_reason": traj.finish_reason,
        "num_turns": len(traj.turns),
        "num_prompt_tokens": len(traj.prompt_ids),
        "num_response_tokens": len(traj.response_ids),
        "model_tokens": traj.num_model_tokens,
        "tool_classes": [rec.cls for rec in traj.tool_call_records],
        "tool_internal_errors": int(traj.metadata.get("tool_internal_errors", 0)),
        "prompt_text": tokenizer.decode(traj.prompt_ids, skip_special_tokens=False),
        "response_text": response_text,
        "turns": turns,
        "metadata": {k: v for k, v in traj.metadata.items() if k not in keys},
        **token_fields(traj),
    }


def outcome_from_record(record: dict[str, Any]) -> SampleOutcome:
    """The metrics' view of one stored record (an answer the evaluation fallback supplied counts as the
    sample's answer)."""
    verdict = record.get("verdict") or {}
    fallback = verdict.get("answer_source") == "fallback"
    answer = verdict.get("extracted") if fallback else record.get("final_answer")
    return SampleOutcome(
        problem_id=str(record["problem_id"]),
        sample_index=int(record["sample_index"]),
        correct=bool(record.get("correct", False)),
        answer=answer,
        answer_source="fallback" if fallback else ("box" if answer is not None else "none"),
        model_tokens=int(record.get("model_tokens", 0)),
        tool_classes=list(record.get("tool_classes", [])),
        finish_reason=str(record.get("finish_reason", "answer")),
        tool_internal_errors=int(record.get("tool_internal_errors", 0)),
        verdict_status=str(verdict.get("status", "ok")),
        controls=dict((record.get("metadata") or {}).get("controls") or {}),
    )


async def build_components(config: EvalConfig) -> EvalComponents:
    """Load the tokenizer and model, start the engine, the sandbox and the verifier for ``config``.

    Raises:
        tirl.models.ModelNotFoundError: the model cannot be found.
        tirl.rollout.agent_loop.SandboxUnavailable: (later, in :func:`run_eval`) the sandbox is not usable.
    """
    return await build_default_components(config)


async def build_components_to_grade(config: EvalConfig) -> EvalComponents:
    """What a run with every sample already stored needs: the verifier's reference check on the sandbox
    executor, no model, tokenizer or engine (:func:`tirl.eval.components.build_grading_components`)."""
    return await build_grading_components(config)


class EvalListener:
    """What :func:`run_eval` reports while it runs. This base class ignores everything (a silent run); the
    command line's display (``tirl.cli.eval_display.ConsoleListener``: a progress bar or plain lines, warnings,
    the table) overrides the methods it needs."""

    def started(self, label: str, model: str, total: int, resumed: int, resumed_correct: int) -> None:
        """The run starts: ``total`` samples, ``resumed`` of them already stored (``resumed_correct`` correct)."""

    def sample_done(self, correct: bool | None) -> None:
        """One sample finished: its verdict, or None when the engine failed (not stored, retried next run)."""

    def warning(self, text: str) -> None:
        """Something a person should read (unparsable references, an engine error, samples left to retry)."""

    def finished(self, summaries: list[BenchmarkSummary], title: str) -> None:
        """The run's summaries (one per benchmark with samples) and a title describing its settings."""

    def close(self) -> None:
        """The run is over, successful or not (stop any display)."""


Sample = tuple[str, dict[str, Any], int]
"""One sample of a run: ``(benchmark, problem row, sample index)``; the row has ``id``, ``problem``, ``answer``."""


def _load_problems(config: EvalConfig, components: EvalComponents | None) -> dict[str, list[dict[str, Any]]]:
    """Benchmark name -> its problem rows, cut to ``config.subsets``/``subset``, read with the components'
    ``load_problems`` when they have one, else :func:`default_load_problems`.

    Raises:
        ValueError / FileNotFoundError: an unknown benchmark.
    """
    load = (components.load_problems if components is not None else None) or default_load_problems
    return {name: load(name)[: config.subsets.get(name, config.subset)] for name in config.benchmarks}


async def _unparsable_golds(
    config: EvalConfig,
    components: EvalComponents,
    problems: dict[str, list[dict[str, Any]]],
    listener: EvalListener,
) -> dict[str, list[str]]:
    """Benchmark name -> the ids of its problems whose reference answer the components' ``check_golds`` cannot
    parse (their samples all score 0); each benchmark with any is one warning to ``listener``. Empty without
    ``check_golds``."""
    bad_gold: dict[str, list[str]] = {}
    if components.check_golds is None:
        return bad_gold
    for name in config.benchmarks:
        reasons = await components.check_golds([row["answer"] for row in problems[name]])
        bad_gold[name] = [row["id"] for row, why in zip(problems[name], reasons) if why is not None]
        if bad_gold[name]:
            listener.warning(
                f"{name}: {len(bad_gold[name])} reference answer(s) cannot be parsed "
                f"(their samples all score 0): {', '.join(map(str, bad_gold[name][:10]))}"
            )
    return bad_gold


def _requests(config: EvalConfig, todo: Sequence[Sample]) -> list[RolloutRequest]:
    """One agent-loop request per sample of ``todo``, seeded with ``derive_seed(seed, benchmark, problem id,
    sample index)`` (a resumed run draws what an uninterrupted one would have); the metadata carries the
    benchmark, the problem id and text and the reference answer, for grading and the record."""
    return [
        RolloutRequest(
            problem=row["problem"],
            group_id=f"{b}/{row['id']}",
            sample_index=j,
            seed=derive_seed(config.seed, b, row["id"], j),
            metadata={"benchmark": b, "problem_id": row["id"], "gold": row["answer"], "problem": row["problem"]},
        )
        for b, row, j in todo
    ]


class _Recorder:
    """The agent loop's ``on_trajectory`` of a run: grades each finished trajectory, appends its record to the
    store (durably, so a re-run resumes) and tells ``listener``; counts ``new`` stored samples and engine
    ``errors`` (a failed trajectory is not stored: the next run retries it)."""

    def __init__(self, loop: AgentLoop | None, components: EvalComponents, store: RunStore, listener: EvalListener):
        self.loop, self.components, self.store, self.listener = loop, components, store, listener
        self.new = 0
        self.errors = 0

    async def __call__(self, request: RolloutRequest, traj: Trajectory) -> None:
        meta = request.metadata
        if traj.finish_reason == "error":
            self.errors += 1
            self.listener.warning(
                f"engine error on {request.group_id}#{request.sample_index}: "
                f"{traj.metadata.get('error')} (not stored; re-run to retry)"
            )
            self.listener.sample_done(None)
            return
        assert self.loop is not None  # called only by the loop's run_many, so a run that generates has one
        response_text = self.loop.response_text(traj.response_ids)
        try:
            verdict = await self.components.grader(traj, response_text, meta["gold"])
        except Exception as exc:  # noqa: BLE001 - a verifier bug must not stop the run; it is reported
            # The answer made grading raise: reward 0, the model's (issue 41), not an infrastructure failure.
            verdict = {"correct": False, "status": "verifier_bug", "detail": bug_detail("the grader", exc)}
        record = trajectory_record(
            traj,
            self.components.tokenizer,
            verdict,
            response_text,
            benchmark=meta["benchmark"],
            problem_id=meta["problem_id"],
            sample_index=request.sample_index,
            seed=request.seed,
            problem=request.problem,
            gold=meta["gold"],
        )
        self.store.append(record)
        self.new += 1
        self.listener.sample_done(bool(record["correct"]))


def _summaries(
    config: EvalConfig, problems: dict[str, list[dict[str, Any]]], store: RunStore, bad_gold: dict[str, list[str]]
) -> list[BenchmarkSummary]:
    """One summary per benchmark with stored samples, over exactly the samples this run asked for (benchmarks x
    subset x samples, also when the store holds more from an earlier, larger run), with its audit."""
    summaries = []
    for name in config.benchmarks:
        keys = [(name, row["id"], j) for row in problems[name] for j in range(config.samples)]
        outcomes = [outcome_from_record(store.records[k]) for k in keys if k in store]
        if outcomes:
            audit = summarize_audits(audit_record(store.records[k], config.protocol) for k in keys if k in store)
            summaries.append(
                summarize(
                    name,
                    outcomes,
                    unparsable_gold=bad_gold.get(name, ()),
                    answer_fallback=config.answer_fallback,
                    audit=audit.to_dict(),
                )
            )
    return summaries


def _summary_json(
    config: EvalConfig,
    summaries: list[BenchmarkSummary],
    recorder: _Recorder,
    resumed: int,
    wanted: int,
    elapsed: float,
) -> dict[str, Any]:
    """What ``summary.json`` holds: the settings, each benchmark's metrics, the sample counts (new, resumed,
    engine errors, missing of the ``wanted`` samples), the audit's counts over all benchmarks, seconds."""
    return {
        "settings": config.resume_settings(),
        "benchmarks": {s.benchmark: s.to_dict() for s in summaries},
        "new_samples": recorder.new,
        "resumed_samples": resumed,
        "engine_errors": recorder.errors,
        "missing_samples": wanted - sum(s.num_samples for s in summaries),
        "audit": {key: sum((s.audit or {}).get(key, 0) for s in summaries) for key in (*AUDIT_KEYS, "trajectories")},
        "elapsed_s": elapsed,
    }


def _report_end(config: EvalConfig, summaries: list[BenchmarkSummary], errors: int, listener: EvalListener) -> None:
    """Give ``listener`` the table (when a benchmark has samples) under a title of the run's settings, then a
    warning when ``errors`` trajectories failed in the engine."""
    if summaries:
        title = (
            f"{config.model}, {config.mode_label()}, "
            f"T={config.rollout.temperature}, {config.rollout.max_turns} turns, "
            f"{config.rollout.max_response_tokens} tokens"
        )
        listener.finished(summaries, title)
    if errors:
        listener.warning(f"{errors} trajectories failed in the engine; re-run the same command to retry them")


async def run_eval(
    config: EvalConfig,
    components: EvalComponents | None = None,
    *,
    listener: EvalListener | None = None,
) -> EvalResult:
    """Run (or resume) one evaluation and return its summaries; progress, warnings and the final table go to
    ``listener`` (silent by default; ``tirl eval`` passes its console display).

    The steps: open the store (resume), read the problems (:func:`_load_problems`; before the model, so that a
    bad benchmark fails first), build the components (without a model when every sample is stored:
    :func:`build_components_to_grade`), check the tools when samples are missing and the
    reference answers (:func:`_unparsable_golds`), sample what is missing (:func:`_requests`), grading and
    storing each as it finishes (:class:`_Recorder`), then summarize (:func:`_summaries`, :func:`_summary_json`)
    and report (:func:`_report_end`).

    Args:
        config: the run's options.
        components: pre-built components (tests, or callers that reuse a loaded model); built from ``config``
            and closed at the end when None. Given components are not closed.
        listener: receives the run's progress and results (:class:`EvalListener`).

    Raises:
        tirl.runs.evals.ResumeMismatch: ``out_dir`` holds a run with different settings.
        tirl.rollout.agent_loop.SandboxUnavailable: tools are enabled and the sandbox fails its health check.
        ValueError / FileNotFoundError: an unknown benchmark.
    """
    listener = listener or EvalListener()
    started = time.perf_counter()
    store = RunStore(config.out_dir, config.resume_settings())
    owned = components is None
    try:
        if store.replaced is not None:
            listener.warning(
                f"{config.out_dir}: its earlier run stored no sample, so this run's settings replace its run.json "
                f"({describe_diff(store.replaced)})"
            )
        problems = _load_problems(config, components)
        wanted = _wanted(config, problems)
        todo = [(b, row, j) for b, row, j in wanted if (b, row["id"], j) not in store]
        resumed = len(wanted) - len(todo)
        if components is None:  # after the problems, so that a bad benchmark fails before the model loads
            # every sample stored: only the reference check and the summary are left, so no model, tokenizer
            # or engine is loaded (re-running a finished evaluation prints its table at once)
            components = await (build_components(config) if todo else build_components_to_grade(config))
        loop = None
        if todo:
            loop = AgentLoop(
                components.router,
                components.executor,
                components.tokenizer,
                config.loop_config(components.context_window),
            )
            await loop.check_tools()
        bad_gold = await _unparsable_golds(config, components, problems, listener)
        stored = [store.records.get((b, row["id"], j)) for b, row, j in wanted]
        resumed_correct = sum(bool(rec.get("correct")) for rec in stored if rec is not None)
        label = "eval" + ("" if config.use_tools else " (no tools)")
        listener.started(label, config.model, len(wanted), resumed, resumed_correct)
        recorder = _Recorder(loop, components, store, listener)
        if loop is not None:
            await loop.run_many(_requests(config, todo), recorder)
        summaries = _summaries(config, problems, store, bad_gold)
        elapsed = time.perf_counter() - started
        summary = _summary_json(config, summaries, recorder, resumed, len(wanted), elapsed)
        store.write_summary(summary)
        _report_end(config, summaries, recorder.errors, listener)
        return EvalResult(summaries, summary, recorder.new, resumed, recorder.errors, elapsed)
    finally:
        listener.close()
        store.close()
        if owned and components is not None:
            await components.aclose()


def all_samples_stored(config: EvalConfig) -> bool:
    """Whether ``config.out_dir`` holds, under ``config``'s settings, every sample the run asks for: then
    :func:`run_eval` generates nothing and loads no model, and ``tirl eval`` starts no server for it. Reads only;
    False when the folder, its ``run.json``, its records or a benchmark cannot be read (the run reports why)."""
    from tirl.runs.evals import read_samples, read_settings, record_key, settings_diff

    try:
        previous = read_settings(config.out_dir)
        settings = json.loads(json.dumps(config.resume_settings()))  # normalised as RunStore compares them
        if previous is None or settings_diff(previous, settings):
            return False
        records, _ = read_samples(config.out_dir)
        stored = {record_key(r) for r in records}
        problems = _load_problems(config, None)
    except Exception:  # noqa: BLE001 - not readable: the run itself opens the folder and says what is wrong
        return False
    return all((name, str(row["id"]), j) in stored for name, row, j in _wanted(config, problems))


def _wanted(config: EvalConfig, problems: dict[str, list[dict[str, Any]]]) -> list[Sample]:
    """Every sample ``config`` asks for, ``(benchmark, problem row, sample index)`` in run order: what
    :func:`run_eval` generates when missing and :func:`all_samples_stored` looks for."""
    return [(name, row, j) for name in config.benchmarks for row in problems[name] for j in range(config.samples)]


def run_eval_sync(config: EvalConfig, **kwargs: Any) -> EvalResult:
    """Blocking :func:`run_eval` (``asyncio.run``)."""
    return asyncio.run(run_eval(config, **kwargs))


__all__: Sequence[str] = [
    "EvalComponents",
    "EvalConfig",
    "EvalListener",
    "EvalResult",
    "Grader",
    "all_samples_stored",
    "build_components",
    "build_components_to_grade",
    "default_load_problems",
    "outcome_from_record",
    "run_eval",
    "run_eval_sync",
    "trajectory_record",
]
