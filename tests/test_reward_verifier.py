"""The verifier's pipeline with scripted executors: status mapping, retries, counting, order, threads.

The executors here return canned ``ExecutionResult`` objects (or run :mod:`tirl.reward.worker` in-process), so
these tests check the verifier's own logic without processes; the real sandbox path is in
``test_reward_table.py``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable, Sequence

import pytest

from tirl.reward import Verifier, VerifierConfig, VerifierStats, VerifyItem, verify
from tirl.reward.payload import PRELOAD_MODULES, PROGRAM, format_worker_output
from tirl.reward.worker import iter_verdicts
from tirl.sandbox.types import CodeExecutor, ExecutionRequest, ExecutionResult


def verify_batch(items, executor=None, **options):
    """A batch through a :class:`Verifier` configured with ``executor`` and ``options`` (sync)."""
    return Verifier(executor, **options).verify_batch(items)


async def averify_batch(items, executor=None, **options):
    """A batch through a :class:`Verifier` configured with ``executor`` and ``options`` (async)."""
    return await Verifier(executor, **options).averify_batch(items)


class ScriptedExecutor:
    """A ``CodeExecutor`` whose answers come from a function of the request (and the call count)."""

    def __init__(self, answer: Callable[[ExecutionRequest, int], ExecutionResult]) -> None:
        self.answer = answer
        self.requests: list[ExecutionRequest] = []
        self.closed = False

    async def run(self, request: ExecutionRequest) -> ExecutionResult:
        return (await self.run_batch([request]))[0]

    async def run_batch(self, requests: Sequence[ExecutionRequest]) -> list[ExecutionResult]:
        out = []
        for request in requests:
            self.requests.append(request)
            out.append(self.answer(request, len(self.requests)))
        return out

    async def aclose(self) -> None:
        self.closed = True


def in_process(request: ExecutionRequest, _n: int) -> ExecutionResult:
    """Run the worker's comparisons in this process (what a sandbox child does, minus the process)."""
    assert request.code == PROGRAM
    lines = "".join(format_worker_output(i, r) for i, r in iter_verdicts(json.loads(request.stdin)))
    return ExecutionResult(status="ok", stdout=lines, exit_code=0, duration_s=0.01)


def items_of(request: ExecutionRequest) -> list[list[str]]:
    return json.loads(request.stdin)["items"]


def fixed(result: ExecutionResult) -> Callable[[ExecutionRequest, int], ExecutionResult]:
    return lambda _request, _n: result


def box(answer: str) -> str:
    return f"<reason>work</reason><answer>The answer is \\boxed{{{answer}}}</answer>"


def test_scripted_executor_satisfies_the_protocol() -> None:
    assert isinstance(ScriptedExecutor(in_process), CodeExecutor)


def test_fast_paths_never_touch_the_executor() -> None:
    executor = ScriptedExecutor(in_process)
    verdicts = verify_batch(
        [(box("1,000"), "1000"), (box("7"), "8"), (box("x+1"), "x + 1"), ("no box at all", "5")], executor
    )
    assert [v.path for v in verdicts] == ["integer", "integer", "string", "none"]
    assert [v.reward for v in verdicts] == [1.0, 0.0, 1.0, 0.0]
    assert executor.requests == []


def test_symbolic_items_go_to_the_executor_with_the_configured_deadline() -> None:
    executor = ScriptedExecutor(in_process)
    config = VerifierConfig(timeout_s=2.5, memory_mb=777)
    verdict = verify(box("\\frac{2}{4}"), "\\frac{1}{2}", executor=executor, config=config)
    assert verdict.correct and verdict.path == "symbolic" and verdict.status == "ok"
    (request,) = executor.requests
    assert request.timeout_s == 2.5 and request.memory_mb == 777
    assert items_of(request) == [["\\frac{1}{2}", "\\frac{2}{4}"]]


def test_integer_gold_with_non_integer_answer_is_still_checked_symbolically() -> None:
    executor = ScriptedExecutor(in_process)
    verdict = verify(box("2^{10}"), "1024", executor=executor)
    assert verdict.correct and verdict.path == "symbolic"


@pytest.mark.parametrize(
    ("result", "status"),
    [
        (ExecutionResult(status="timeout", duration_s=5.0, exit_code=-9), "timeout"),
        (ExecutionResult(status="killed", exit_code=-9), "timeout"),
        (
            ExecutionResult(status="error", error_type="ImportError", traceback="ImportError: no math_verify"),
            "verifier_error",
        ),
        (ExecutionResult(status="ok", stdout="the worker printed something else\n"), "verifier_error"),
        (ExecutionResult(status="internal", stderr="worker died"), "verifier_error"),
    ],
)
def test_executor_outcomes_map_to_statuses_and_never_to_a_silent_pass(result: ExecutionResult, status: str) -> None:
    verdict = verify(box("\\sqrt{2}"), "\\sqrt{2}+0", executor=ScriptedExecutor(fixed(result)), stats=VerifierStats())
    assert verdict.status == status
    assert verdict.reward == 0.0
    assert verdict.detail


def test_internal_errors_are_retried_with_fresh_request_ids() -> None:
    def flaky(request: ExecutionRequest, n: int) -> ExecutionResult:
        return ExecutionResult.internal_error("worker died") if n == 1 else in_process(request, n)

    executor = ScriptedExecutor(flaky)
    verdict = verify(box("\\frac{2}{4}"), "\\frac{1}{2}", executor=executor, config=VerifierConfig(internal_retries=1))
    assert verdict.correct and verdict.status == "ok"
    assert len(executor.requests) == 2
    assert executor.requests[0].request_id != executor.requests[1].request_id


def test_internal_errors_without_retries_become_verifier_errors() -> None:
    executor = ScriptedExecutor(fixed(ExecutionResult.internal_error("down")))
    verdict = verify(box("\\frac{2}{4}"), "\\frac{1}{2}", executor=executor, config=VerifierConfig(internal_retries=0))
    assert verdict.status == "verifier_error"
    assert len(executor.requests) == 2  # the comparison, then its control (the reference with itself): down too


class RaisingExecutor(ScriptedExecutor):
    async def run_batch(self, requests: Sequence[ExecutionRequest]) -> list[ExecutionResult]:
        raise ConnectionError("service unreachable")


def test_an_executor_that_raises_gives_verifier_errors_not_an_exception() -> None:
    verdicts = verify_batch([(box("\\frac{2}{4}"), "\\frac{1}{2}"), (box("5"), "5")], RaisingExecutor(in_process))
    assert [v.status for v in verdicts] == ["verifier_error", "ok"]


class ShortExecutor(ScriptedExecutor):
    async def run_batch(self, requests: Sequence[ExecutionRequest]) -> list[ExecutionResult]:
        return []


def test_an_executor_that_answers_too_few_results_gives_verifier_errors() -> None:
    verdict = verify(
        box("\\frac{2}{4}"),
        "\\frac{1}{2}",
        executor=ShortExecutor(in_process),
        config=VerifierConfig(internal_retries=0),
    )
    assert verdict.status == "verifier_error"


def test_batch_preserves_order_across_fast_and_symbolic_items() -> None:
    golds = ["1", "\\frac{1}{2}", "3", "\\sqrt{2}", "5", "\\pi"]
    answers = ["1", "0.5", "4", "2^{1/2}", "5", "\\pi"]
    verdicts = verify_batch([(box(a), g) for a, g in zip(answers, golds)], ScriptedExecutor(in_process))
    assert [v.gold for v in verdicts] == golds
    assert [v.extracted for v in verdicts] == answers
    assert [v.correct for v in verdicts] == [True, True, False, True, True, True]


def test_stats_count_every_status_and_log_the_abnormal_ones(caplog: pytest.LogCaptureFixture) -> None:
    stats = VerifierStats()
    executor = ScriptedExecutor(
        lambda req, n: ExecutionResult(status="timeout", duration_s=5.0) if "tower" in req.stdin else in_process(req, n)
    )
    items = [
        (box("5"), "5"),
        ("nothing", "5"),
        (box("1"), "$12:00$"),
        (box("tower"), "5"),  # the answer hangs, the control of "5" with itself does not: answer_timeout
        (box("7"), "\\tower"),  # the reference hangs its control too: timeout
        (box("\\frac{1}{2}"), "0.5"),
    ]
    with caplog.at_level(logging.WARNING, logger="tirl.reward"):
        verify_batch(items, executor, stats=stats)
    snap = stats.snapshot()
    assert snap["total"] == 6 and snap["correct"] == 2
    assert snap["by_status"] == {
        "ok": 2,
        "no_answer": 1,
        "hedged": 0,
        "unparsable_gold": 1,
        "timeout": 1,
        "answer_timeout": 1,
        "answer_error": 0,
        "verifier_error": 0,
        "verifier_bug": 0,
    }
    logged = " ".join(record.getMessage() for record in caplog.records)
    assert "unparsable_gold" in logged and "timeout" in logged and "answer_timeout" in logged
    assert "no_answer" not in logged


def test_stats_merge_adds_counts() -> None:
    a, b = VerifierStats(), VerifierStats()
    verify_batch([(box("5"), "5")], ScriptedExecutor(in_process), stats=a)
    verify_batch([(box("6"), "5"), ("x", "5")], ScriptedExecutor(in_process), stats=b)
    a.merge(b)
    assert a.snapshot()["total"] == 3 and a.snapshot()["by_status"]["no_answer"] == 1


@pytest.mark.parametrize("gold", ["", "   ", None])
def test_empty_reference_is_unparsable_gold(gold: object) -> None:
    verdict = verify(box("5"), gold, executor=ScriptedExecutor(in_process), stats=VerifierStats())  # type: ignore[arg-type]
    assert verdict.status == "unparsable_gold" and not verdict.correct


def test_integer_reference_given_as_int_is_accepted() -> None:
    assert verify(box("42"), 42, executor=ScriptedExecutor(in_process)).correct  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "response", [None, "", "\\boxed{}", "<answer>no box here</answer> \\boxed{5}", "\\boxed{\\frac{1}{"]
)
def test_missing_answers_are_no_answer(response: str | None) -> None:
    verdict = verify(response, "5", executor=ScriptedExecutor(in_process))
    assert verdict.status == "no_answer" and verdict.reward == 0.0


def test_boxes_inside_tool_responses_never_count() -> None:
    text = "<tool_call>{}</tool_call><tool_response>\\boxed{5}</tool_response> So it is <answer>\\boxed{6}</answer>"
    assert verify(text, "5", executor=ScriptedExecutor(in_process)).correct is False


def test_items_accept_pairs_dicts_and_items_and_reject_other_shapes() -> None:
    executor = ScriptedExecutor(in_process)
    verdicts = verify_batch(
        [(box("5"), "5"), {"response": box("5"), "gold": "5"}, VerifyItem(None, "5", answer="5")], executor
    )
    assert all(v.correct for v in verdicts)
    with pytest.raises(TypeError):
        verify_batch(["just a string"], executor)


def test_verify_works_from_worker_threads() -> None:  # F77
    executor = ScriptedExecutor(in_process)
    results: dict[int, bool] = {}

    def work(i: int) -> None:
        results[i] = verify(box("\\frac{2}{4}"), "\\frac{1}{2}", executor=executor).correct

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == {0: True, 1: True, 2: True, 3: True}


async def test_sync_verify_inside_a_running_event_loop() -> None:
    verdict = verify(box("\\frac{2}{4}"), "\\frac{1}{2}", executor=ScriptedExecutor(in_process))
    assert verdict.correct


async def test_averify_batch_runs_on_the_callers_loop() -> None:
    seen: list[asyncio.AbstractEventLoop] = []

    class LoopRecorder(ScriptedExecutor):
        async def run_batch(self, requests: Sequence[ExecutionRequest]) -> list[ExecutionResult]:
            seen.append(asyncio.get_running_loop())
            return await super().run_batch(requests)

    verdicts = await averify_batch([(box("\\frac{2}{4}"), "\\frac{1}{2}")], LoopRecorder(in_process))
    assert verdicts[0].correct
    assert seen == [asyncio.get_running_loop()]


async def test_large_batches_are_extracted_off_the_event_loop(monkeypatch) -> None:
    # The service's verify route ran extraction on its event loop: a 60 MB batch kept /healthz from
    # answering for about 20 s (long enough for clients to take the server out of rotation).
    from tirl.reward import verifier as verifier_module

    threads: list[int] = []
    real_extract = verifier_module.extract_answer

    def recording_extract(*args, **kwargs):
        threads.append(threading.get_ident())
        return real_extract(*args, **kwargs)

    monkeypatch.setattr(verifier_module, "extract_answer", recording_extract)
    executor = ScriptedExecutor(in_process)
    big = "x" * verifier_module.INLINE_PREPARE_CHARS + box("\\frac{2}{4}")
    verdicts = await averify_batch([(big, "\\frac{1}{2}"), (box("7"), "7")], executor)
    assert [v.correct for v in verdicts] == [True, True]
    assert threads and threading.get_ident() not in threads
    threads.clear()
    assert (await averify_batch([(box("7"), "7")], executor))[0].correct  # small batches stay inline
    assert threads == [threading.get_ident()]


async def test_verifier_object_async_and_sync_agree() -> None:
    verifier = Verifier(ScriptedExecutor(in_process), stats=VerifierStats())
    a = await verifier.averify(box("0.5"), "\\frac{1}{2}")
    b = await asyncio.to_thread(verifier.verify, box("0.5"), "\\frac{1}{2}")
    assert a.correct and b.correct
    assert verifier.stats.snapshot()["total"] == 2


def test_verdict_serialises_with_its_reward() -> None:
    verdict = verify(box("5.0"), "5", executor=ScriptedExecutor(in_process))
    data = verdict.to_dict()
    assert data["reward"] == 1.0 and data["status"] == "ok" and data["path"] == "integer"
    json.dumps(data)


# ------------------------------------------------------------------------------------------ chunks


class PoolLike(ScriptedExecutor):
    max_concurrency = 2


def symbolic_items(n: int) -> list[tuple[str, str]]:
    return [(box(f"\\frac{{{2 * k}}}{{{2 * k + 2}}}"), f"\\frac{{{k}}}{{{k + 1}}}") for k in range(1, n + 1)]


def test_symbolic_items_travel_in_chunks_sized_to_the_executor() -> None:
    executor = PoolLike(in_process)
    verdicts = verify_batch(symbolic_items(20), executor, config=VerifierConfig(chunk_size=8))
    assert all(v.correct for v in verdicts)
    assert [len(items_of(r)) for r in executor.requests] == [8, 8, 4]


def test_few_items_are_spread_over_the_executor_slots() -> None:
    executor = PoolLike(in_process)
    verify_batch(symbolic_items(4), executor, config=VerifierConfig(chunk_size=8))
    assert [len(items_of(r)) for r in executor.requests] == [2, 2]


def test_chunk_size_one_sends_each_item_alone() -> None:
    executor = PoolLike(in_process)
    verify_batch(symbolic_items(3), executor, config=VerifierConfig(chunk_size=1))
    assert [len(items_of(r)) for r in executor.requests] == [1, 1, 1]


def hangs_on(marker: str) -> Callable[[ExecutionRequest, int], ExecutionResult]:
    """Like a sandbox: a chunk reaching an item containing ``marker`` is killed at the deadline, keeping the
    verdict lines printed before it."""

    def answer(request: ExecutionRequest, _n: int) -> ExecutionResult:
        lines = []
        for i, (gold, pred) in enumerate(items_of(request)):
            if marker in pred:
                return ExecutionResult(
                    status="timeout", stdout="".join(lines), duration_s=request.timeout_s, exit_code=-9
                )
            ((_, result),) = iter_verdicts({"items": [[gold, pred]], "options": {}})
            lines.append(format_worker_output(i, result))
        return ExecutionResult(status="ok", stdout="".join(lines), exit_code=0)

    return answer


def test_a_hanging_item_costs_only_itself_and_is_retried_alone() -> None:
    executor = PoolLike(hangs_on("hang"))
    items = symbolic_items(3)
    items.insert(1, (box("\\hang"), "5"))
    # (the control comparison of a timeout is its own test below)
    verdicts = verify_batch(items, executor, config=VerifierConfig(chunk_size=8, timeout_s=1.0, timeout_control=False))
    assert [v.status for v in verdicts] == ["ok", "timeout", "ok", "ok"]
    assert [v.correct for v in verdicts] == [True, False, True, True]
    chunk_sizes = [len(items_of(r)) for r in executor.requests]
    # Two chunks of two; the first is killed at the hanging item, which then runs alone; nothing else reruns.
    assert chunk_sizes == [2, 2, 1]
    assert items_of(executor.requests[-1]) == [["5", "\\hang"]]


class OneSlot(ScriptedExecutor):
    max_concurrency = 1


def test_items_after_a_killed_item_in_the_same_chunk_run_again_alone() -> None:
    executor = OneSlot(hangs_on("hang"))
    items = [(box("\\hang"), "5")] + symbolic_items(2)
    verdicts = verify_batch(items, executor, config=VerifierConfig(chunk_size=3, timeout_control=False))
    assert [v.status for v in verdicts] == ["timeout", "ok", "ok"]
    assert [len(items_of(r)) for r in executor.requests] == [3, 1, 1, 1]


def hangs_on_either(marker: str) -> Callable[[ExecutionRequest, int], ExecutionResult]:
    """Like :func:`hangs_on`, for one item per request, when the marker is in the reference or the answer."""

    def answer(request: ExecutionRequest, _n: int) -> ExecutionResult:
        ((gold, pred),) = items_of(request)
        if marker in gold or marker in pred:
            return ExecutionResult(status="timeout", duration_s=request.timeout_s, exit_code=-9)
        ((_, result),) = iter_verdicts({"items": [[gold, pred]], "options": {}})
        return ExecutionResult(status="ok", stdout=format_worker_output(0, result), exit_code=0)

    return answer


def test_a_deadline_is_charged_to_the_answer_when_the_reference_compares_with_itself_in_time() -> None:
    """An answer written to time the comparison out (a masked ``timeout`` escapes the negative reward) is
    ``answer_timeout``: the control comparison of the reference with itself finished under the same deadline."""
    executor = PoolLike(hangs_on_either("hang"))
    items = [(box("\\hang"), "5"), (box("3"), "\\hang{7}"), (box("\\frac{2}{4}"), "\\frac{1}{2}")]
    verdicts = verify_batch(items, executor, config=VerifierConfig(chunk_size=1, timeout_s=1.0))
    assert [v.status for v in verdicts] == ["answer_timeout", "timeout", "ok"]
    assert [v.correct for v in verdicts] == [False, False, True] and verdicts[0].reward == 0.0
    assert "the reference compared with itself" in verdicts[0].detail
    # one control per timeout, of the reference with itself, after the comparisons
    assert [items_of(r) for r in executor.requests[3:]] == [[["5", "5"]], [["\\hang{7}", "\\hang{7}"]]]
    off = verify_batch(items[:1], PoolLike(hangs_on_either("hang")), config=VerifierConfig(timeout_control=False))
    assert off[0].status == "timeout"


def test_a_real_answer_built_to_time_out_the_comparison_is_the_models() -> None:
    """Through the real worker in a real sandbox: ``\\Gamma(10^{7})`` against 5 (a red-team review's cheap trigger
    of the deadline) passes the deadline, the reference 5 compares with itself at once."""
    from tirl.sandbox import LocalSandbox

    async def go():
        async with LocalSandbox(workers=1, preload=PRELOAD_MODULES) as sandbox:
            verifier = Verifier(executor=sandbox, config=VerifierConfig(timeout_s=2.0))
            return await verifier.averify_batch([(box("\\Gamma(10^{7})"), "5"), (box("\\frac{10}{2}"), "5")])

    late, fine = asyncio.run(go())
    assert (late.status, late.correct) == ("answer_timeout", False), late
    assert (fine.status, fine.correct) == ("ok", True), fine


def test_an_internal_chunk_makes_its_items_verifier_errors_without_solo_reruns() -> None:
    executor = PoolLike(fixed(ExecutionResult.internal_error("worker died")))
    verdicts = verify_batch(symbolic_items(4), executor, config=VerifierConfig(internal_retries=0))
    assert [v.status for v in verdicts] == ["verifier_error"] * 4
    # the 4 comparisons in 2 chunks, then their 4 controls (each reference with itself) chunked the same way: down
    # too, so the items stay verifier_error; no item was re-run alone
    assert len(executor.requests) == 4


def test_per_item_duration_comes_from_the_worker_not_the_chunk() -> None:
    def slow_chunk(request: ExecutionRequest, n: int) -> ExecutionResult:
        result = in_process(request, n)
        result.duration_s = 100.0  # the whole chunk's time: must not be charged to each item
        return result

    verdicts = verify_batch(symbolic_items(4), OneSlot(slow_chunk), config=VerifierConfig(chunk_size=4))
    assert all(0 < v.duration_s < 100.0 for v in verdicts)


# ------------------------------------------------------------------------------------ robustness

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tirl.reward import VERIFY_STATUSES  # noqa: E402

GARBAGE_RESULTS = st.builds(
    ExecutionResult,
    status=st.sampled_from(["ok", "error", "timeout", "killed", "internal"]),
    stdout=st.one_of(st.text(max_size=200), st.just('TIRL-VERDICT {"i": 0, "status": "ok", "correct": true}\n')),
    stderr=st.text(max_size=50),
)


@settings(max_examples=150, deadline=None)
@given(response=st.one_of(st.none(), st.text(max_size=200)), gold=st.text(max_size=40), answer=GARBAGE_RESULTS)
def test_verify_never_raises_whatever_the_text_or_the_executor_says(
    response: str | None, gold: str, answer: ExecutionResult
) -> None:
    stats = VerifierStats()
    box_text = None if response is None else response + " \\boxed{" + response[:20] + "}"
    for text in (response, box_text):
        verdict = verify(
            text, gold, executor=ScriptedExecutor(fixed(answer)), stats=stats, config=VerifierConfig(internal_retries=0)
        )
        assert verdict.status in VERIFY_STATUSES
        assert verdict.correct is (verdict.reward == 1.0)
        assert not verdict.correct or verdict.status == "ok"


def test_sync_verify_works_in_a_forked_child_after_the_parent_used_it() -> None:
    import os

    verify(box("\\frac{2}{4}"), "\\frac{1}{2}", executor=ScriptedExecutor(in_process))  # parent starts its loop
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            ok = verify(box("\\frac{2}{4}"), "\\frac{1}{2}", executor=ScriptedExecutor(in_process)).correct
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1" and status == 0


def test_given_answers_skip_extraction() -> None:
    pairs = [("\\frac{2}{4}", "\\frac{1}{2}"), ("7 apples", "7"), ("", "7")]
    verdicts = verify_batch(
        [VerifyItem(None, gold, answer=answer) for answer, gold in pairs], ScriptedExecutor(in_process)
    )
    assert [v.extracted for v in verdicts] == ["\\frac{2}{4}", "7 apples", None]  # taken as given, not searched
    assert [v.correct for v in verdicts] == [True, True, False]
    assert verdicts[2].status == "no_answer"


def test_the_reference_probe_is_not_a_hedged_answer() -> None:  # issue 23: it must reach the reference's parsing
    from tirl.reward.forms import commitment_problem
    from tirl.reward.verifier import REFERENCE_PROBE

    assert commitment_problem(REFERENCE_PROBE, "5") is None


def fails_on(marker: str) -> Callable[[ExecutionRequest, int], ExecutionResult]:
    """A worker that dies (``internal``) on any comparison whose answer or reference holds ``marker``."""

    def answer(request: ExecutionRequest, _n: int) -> ExecutionResult:
        ((gold, pred),) = items_of(request)
        if marker in gold or marker in pred:
            return ExecutionResult.internal_error("worker died")
        ((_, result),) = iter_verdicts({"items": [[gold, pred]], "options": {}})
        return ExecutionResult(status="ok", stdout=format_worker_output(0, result), exit_code=0)

    return answer


def test_a_worker_failure_is_charged_to_the_answer_when_the_reference_compares_with_itself() -> None:
    """Issue 41: an answer that makes the checking worker fail (a masked ``verifier_error`` would let it escape the
    negative reward) is ``answer_error`` when the control comparison of the reference with itself succeeds; a
    reference that fails its own control keeps ``verifier_error`` (masked)."""
    from tirl.algo.infra import infra_cause

    items = [(box("\\crash"), "5"), (box("3"), "\\crash{7}"), (box("\\frac{2}{4}"), "\\frac{1}{2}")]
    config = VerifierConfig(chunk_size=1, internal_retries=0)
    verdicts = verify_batch(items, PoolLike(fails_on("crash")), config=config)
    assert [v.status for v in verdicts] == ["answer_error", "verifier_error", "ok"]
    assert verdicts[0].reward == 0.0 and "what made the comparison fail" in verdicts[0].detail
    assert infra_cause(object(), "answer_error") is None and infra_cause(object(), "verifier_error") == "verifier"
    off = verify_batch(
        items[:1],
        PoolLike(fails_on("crash")),
        config=VerifierConfig(chunk_size=1, internal_retries=0, timeout_control=False),
    )
    assert off[0].status == "verifier_error"
