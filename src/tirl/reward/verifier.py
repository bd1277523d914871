"""Final-answer verification: the binary reward of rStar2-Agent, with hard deadlines and counted failures.

Covers :class:`Verifier` (sync and async, one item or a batch, reference checks) and :func:`verify`, the one
convenience function (one response, the shared default executor unless one is given). For each
``(response, gold)`` item:

1. the answer is extracted with :func:`tirl.protocol.extract_answer` (the last box of the last ``<answer>``
   block, paper section 2.2; tool responses never count); none gives status ``no_answer``;
2. *string fast path*: identical normalised texts are correct (:func:`tirl.reward.normalize.normalize_text`);
3. *integer fast path*: when the reference is an integer (the report trains on integer answers only) and the
   prediction reads as one under the documented policy (:func:`tirl.reward.normalize.canonical_integer`),
   the digits are compared in the caller's process, without sympy;
4. everything else goes to math-verify in a sandbox worker (:mod:`tirl.reward.worker`) through a
   :class:`~tirl.sandbox.types.CodeExecutor` (``LocalSandbox`` or ``SandboxClient``), in chunks of up to
   ``VerifierConfig.chunk_size`` comparisons per forked process, with the per-item deadline
   ``VerifierConfig.timeout_s`` enforced by the executor killing the process. Items a chunk did not answer
   are re-run alone with the full deadline (see :meth:`Verifier._compare`). Outcomes of a lone item:
   ``timeout``/``killed`` -> ``timeout``; ``internal`` -> retried, then ``verifier_error``; ``error`` or no
   verdict line -> ``verifier_error``. A ``timeout`` is then attributed by a control comparison of the
   reference with itself (``VerifierConfig.timeout_control``): if that finishes, ``answer_timeout``.

Every verdict is counted in a :class:`~tirl.reward.types.VerifierStats` (the module-wide
:func:`default_stats` unless one is given); ``unparsable_gold``, ``timeout`` and ``verifier_error`` are also
logged. Nothing raises for any item content (issue 41): an exception in grading code, in this process (answer
reading, the fast paths) or in the worker (math-verify, a guard), is that item's verdict ``verifier_bug``,
reward 0, never a failed batch and never a masked sample (logged once per exception type and location).

Threads and event loops: the async methods run on the caller's loop; the sync ones run on a private
background loop thread, so they work from any thread (field case F77) and from inside a running loop. Runs
(``tirl eval``, ``tirl train rl``, ``tirl data filter-hard``) always give the verifier their own executor
(:func:`tirl.runtime.build_verifier`). With no ``executor``, a shared ``LocalSandbox`` that preloads
math-verify and this package's worker (:data:`tirl.reward.payload.PRELOAD_MODULES`) is created on first
symbolic use, lives on that background loop, and is closed at exit (or by :func:`close_default_executor`).
An explicit executor given to a *sync* method is used on the background loop, so it must not be bound to
another event loop.

It does not decide what counts as the final answer (``tirl.protocol``) nor run the comparison itself
(``tirl.reward.worker``).
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import math
import os
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from tirl.protocol import extract_answer
from tirl.protocol.config import ProtocolConfig
from tirl.reward.forms import Reading, commitment_problem, hedge_words, question_base, read_answer
from tirl.reward.normalize import MAX_SYMBOLIC_CHARS, canonical_integer, normalize_text
from tirl.reward.payload import PRELOAD_MODULES, PROGRAM, encode_payload, parse_worker_output
from tirl.reward.types import BUG_STATUS, Verdict, VerifierConfig, VerifierStats, VerifyItem, bug_detail
from tirl.sandbox.types import CodeExecutor, ExecutionRequest, ExecutionResult

_DEFAULT_STATS = VerifierStats()
#: ``averify_batch`` runs extraction and the fast paths in a thread when the batch holds more characters.
INLINE_PREPARE_CHARS = 1 << 18


def default_stats() -> VerifierStats:
    """The module-wide counters used when no ``stats`` object is passed."""
    return _DEFAULT_STATS


_loop_lock = threading.Lock()
_loop_thread: Any = None  # tirl._loop.BackgroundLoop, started on first use
_default_executor: CodeExecutor | None = None
_default_executor_lock: asyncio.Lock | None = None


_owner_pid = os.getpid()


def _background() -> Any:
    """The background loop thread, started on first use (again in a forked child: the parent's loop, thread
    and default executor do not exist there)."""
    global _loop_thread, _default_executor, _default_executor_lock, _owner_pid
    with _loop_lock:
        if os.getpid() != _owner_pid:
            _owner_pid = os.getpid()
            _loop_thread = None
            _default_executor = None
            _default_executor_lock = None
        if _loop_thread is None or not _loop_thread.thread.is_alive():
            # imported here: sandbox workers import this module, and calls there may read only tirl.reward and
            # tirl.protocol (SandboxConfig.readable_packages)
            from tirl._loop import BackgroundLoop

            _loop_thread = BackgroundLoop("tirl-reward-loop")
            _default_executor = None  # it belonged to the dead loop
            _default_executor_lock = None
        return _loop_thread


def _create_default_executor(workers: int | None = None) -> CodeExecutor:
    """A ``LocalSandbox`` set up for verification: it preloads :data:`~tirl.reward.payload.PRELOAD_MODULES`.

    Args:
        workers: worker processes (None: one per usable core).
    """
    from tirl.sandbox import LocalSandbox

    return LocalSandbox(workers=workers, preload=PRELOAD_MODULES)


async def _get_default_executor() -> CodeExecutor:
    """The shared default executor; must be awaited on the background loop."""
    global _default_executor, _default_executor_lock
    if _default_executor_lock is None:
        _default_executor_lock = asyncio.Lock()
    async with _default_executor_lock:
        if _default_executor is None:
            _default_executor = _create_default_executor()
        return _default_executor


def close_default_executor() -> None:
    """Close the shared default executor if one was created (idempotent; also registered with atexit)."""
    global _default_executor
    thread = _loop_thread
    executor = _default_executor
    _default_executor = None
    if executor is None or thread is None or not thread.thread.is_alive():
        return
    try:
        thread.submit(executor.aclose()).result(timeout=30)
    except Exception:  # noqa: BLE001 - closing at exit is best effort
        pass


atexit.register(close_default_executor)


Outcome = tuple[str, bool, "str | None", float]  # (status, correct, detail, seconds in the worker)
# (index, gold, extracted, seconds so far, read gold, read answer): an item waiting for the symbolic path
Pending = tuple[int, str, str, float, str, str]

_DEFAULT_PARALLELISM = 8


def _solo_outcome(result: ExecutionResult) -> Outcome:
    """The outcome of a one-item worker request from its executor result."""
    verdict = parse_worker_output(result.stdout).get(0)
    if verdict is not None:
        correct = verdict["correct"] and verdict["status"] == "ok"
        return verdict["status"], correct, verdict["detail"], verdict["seconds"] or result.duration_s
    if result.status in ("timeout", "killed"):
        reason = "deadline passed" if result.status == "timeout" else "killed by a resource limit"
        return "timeout", False, f"worker {reason} after {result.duration_s:.2f}s", result.duration_s
    if result.status == "internal":
        return "verifier_error", False, "executor internal error: " + (result.stderr or "")[-300:], result.duration_s
    tail = (result.traceback or result.stderr or result.stdout or "")[-300:]
    return "verifier_error", False, f"worker gave no verdict (status {result.status}): {tail}", result.duration_s


@functools.lru_cache(maxsize=4096)
def _gold_view(gold: str, question: str | None) -> tuple[Reading, str | None, int | None, frozenset[str]]:
    """The reference as the fast paths see it (cached: a reference is verified against many samples).

    Returns:
        ``(reading, canonical integer or None, base, words)``: ``base`` is the base in which bare-numeral
        answers are read (the reference is written in base b and the question asks for base b), else None;
        ``words`` the hedge words the reference itself holds (:func:`tirl.reward.forms.hedge_words`).
    """
    integer = canonical_integer(gold)
    if integer is not None and "_" not in gold:
        # Reading never turns an integer of the integer policy into another value; only a base subscript
        # (which the integer policy does not read) needs it.
        return Reading(gold), integer, None, hedge_words(gold)
    reading = read_answer(gold)
    if reading.problem is None and len(reading.text) > MAX_SYMBOLIC_CHARS and integer is None:
        reading = Reading(
            reading.text,
            f"a reference of {len(reading.text)} characters that is not a plain "
            f"integer (over {MAX_SYMBOLIC_CHARS}) is not compared symbolically",
        )
    integer = canonical_integer(reading.text) if reading.problem is None else None
    base = reading.base if reading.base is not None and question_base(question) == reading.base else None
    return reading, integer, base, hedge_words(gold)


def _bug_verdict(item: VerifyItem, where: str, exc: BaseException) -> Verdict:
    """The verdict of an item on which grading code raised: reward 0, status ``verifier_bug`` (not masked)."""
    gold = item.gold if isinstance(item.gold, str) else str(item.gold)
    answer = item.answer if isinstance(item.answer, str) else None
    return Verdict(False, BUG_STATUS, answer, gold, "none", 0.0, bug_detail(where, exc))


def _parallelism(executor: CodeExecutor) -> int:
    """How many requests the executor runs at once (``max_concurrency`` when it says), for chunk sizing."""
    value = getattr(executor, "max_concurrency", None)
    return value if isinstance(value, int) and value > 0 else _DEFAULT_PARALLELISM


class Verifier:
    """Verifies responses against reference answers (see the module docstring for the pipeline).

    Args:
        executor: where symbolic comparisons run; None uses the shared default ``LocalSandbox``.
        config: the policies and deadline (:class:`~tirl.reward.types.VerifierConfig`).
        stats: counters to record into; None uses :func:`default_stats`.
        protocol_config: passed to :func:`tirl.protocol.extract_answer` (answer tags, fallback policy).
    """

    def __init__(
        self,
        executor: CodeExecutor | None = None,
        config: VerifierConfig | None = None,
        stats: VerifierStats | None = None,
        protocol_config: ProtocolConfig | None = None,
    ) -> None:
        self.executor = executor
        self.config = config or VerifierConfig()
        self.stats = stats if stats is not None else _DEFAULT_STATS
        self.protocol_config = protocol_config

    # ----------------------------------------------------------------------------------- in-process part
    def _fast(self, item: VerifyItem) -> tuple[Verdict | None, str | None, str, tuple[str, str] | None]:
        """Extraction, reading (:func:`tirl.reward.forms.read_answer`) and fast paths.

        Returns:
            ``(verdict, extracted, gold, pair)``: the verdict, or None when the symbolic path is needed, and
            then ``pair`` holds the read ``(gold, answer)`` texts the worker compares.
        """
        gold = item.gold
        if isinstance(gold, (int,)) and not isinstance(gold, bool):
            gold = str(gold)
        if not isinstance(gold, str) or not gold.strip():
            verdict = Verdict(
                False, "unparsable_gold", None, str(gold or ""), "none", 0.0, "empty or non-string reference"
            )
            return verdict, None, "", None
        if item.answer is not None:
            extracted = item.answer if isinstance(item.answer, str) else None
        else:
            try:
                extracted = extract_answer(item.response, self.protocol_config) if item.response is not None else None
            except Exception as exc:  # noqa: BLE001 - the extractor promises not to raise; be safe anyway
                return (
                    Verdict(False, BUG_STATUS, None, gold, "none", 0.0, bug_detail("extract_answer", exc)),
                    None,
                    gold,
                    None,
                )
        if extracted is None or not extracted.strip():
            return Verdict(False, "no_answer", None, gold, "none"), None, gold, None
        cfg = self.config
        if cfg.string_fast_path:
            norm_pred = normalize_text(extracted)
            if norm_pred and norm_pred == normalize_text(gold):
                return Verdict(True, "ok", extracted, gold, "string"), extracted, gold, None
        gold_reading, gold_int, pred_base, gold_words = _gold_view(gold, item.question)
        if gold_reading.problem is not None:
            return (
                Verdict(False, "unparsable_gold", extracted, gold, "none", 0.0, gold_reading.problem),
                None,
                gold,
                None,
            )
        if cfg.integer_fast_path and gold_int is not None and pred_base is None:
            # Reading the answer never turns an integer of the integer policy into another integer, so an
            # answer that already is one is decided before the (slower) reading. Such an answer holds no
            # hedge word (the integer policy never drops one as a unit), so the check below cannot apply.
            pred_int = canonical_integer(extracted)
            if pred_int is not None:
                return Verdict(gold_int == pred_int, "ok", extracted, gold, "integer"), extracted, gold, None
        hedge = commitment_problem(extracted, gold, gold_words)
        if hedge is not None:
            return Verdict(False, "hedged", extracted, gold, "string", 0.0, hedge), extracted, gold, None
        pred_reading = read_answer(extracted, pred_base)
        if pred_reading.problem is not None:
            return Verdict(False, "ok", extracted, gold, "string", 0.0, pred_reading.problem), extracted, gold, None
        if cfg.string_fast_path:
            norm_pred = normalize_text(pred_reading.text)
            if norm_pred and norm_pred == normalize_text(gold_reading.text):
                return Verdict(True, "ok", extracted, gold, "string"), extracted, gold, None
        if cfg.integer_fast_path and gold_int is not None:
            pred_int = canonical_integer(pred_reading.text)
            if pred_int is not None:
                return Verdict(gold_int == pred_int, "ok", extracted, gold, "integer"), extracted, gold, None
        if len(pred_reading.text) > MAX_SYMBOLIC_CHARS:
            # Deterministic: math-verify on such a text ends ok or timeout depending on the machine's load.
            detail = (
                f"an answer of {len(pred_reading.text)} characters not decided by the integer path "
                f"(over {MAX_SYMBOLIC_CHARS}) is not compared symbolically"
            )
            return Verdict(False, "ok", extracted, gold, "string", 0.0, detail), extracted, gold, None
        return None, extracted, gold, (gold_reading.text, pred_reading.text)

    def _request(self, pairs: Sequence[tuple[str, str]]) -> ExecutionRequest:
        """One worker request for a chunk of ``(gold, extracted)`` pairs, under the per-item deadline."""
        return ExecutionRequest(
            code=PROGRAM,
            stdin=encode_payload(pairs, self.config.worker_options()),
            timeout_s=self.config.timeout_s,
            memory_mb=self.config.memory_mb,
        )

    # ------------------------------------------------------------------------------------ symbolic part
    async def _run_requests(self, executor: CodeExecutor, requests: list[ExecutionRequest]) -> list[ExecutionResult]:
        """Run worker requests, retrying ``internal`` answers up to ``internal_retries`` times."""
        try:
            results = list(await executor.run_batch(requests))
        except Exception as exc:  # noqa: BLE001 - executors should not raise; count it if one does
            return [ExecutionResult.internal_error(f"executor raised {exc!r}"[:300]) for _ in requests]
        if len(results) != len(requests):
            return [
                ExecutionResult.internal_error("executor answered a different number of requests") for _ in requests
            ]
        for _ in range(max(0, self.config.internal_retries)):
            retry = [i for i, r in enumerate(results) if r.status == "internal"]
            if not retry:
                break
            # Fresh request ids: a service must run a retry again, not answer it from its result cache.
            again = [self._clone(requests[i]) for i in retry]
            try:
                answers = list(await executor.run_batch(again))
            except Exception as exc:  # noqa: BLE001
                answers = [ExecutionResult.internal_error(f"executor raised {exc!r}"[:300]) for _ in again]
            for i, answer in zip(retry, answers):
                results[i] = answer
        return results

    @staticmethod
    def _clone(request: ExecutionRequest) -> ExecutionRequest:
        return ExecutionRequest(
            code=request.code, stdin=request.stdin, timeout_s=request.timeout_s, memory_mb=request.memory_mb
        )

    async def _compare(self, executor: CodeExecutor, pairs: list[tuple[str, str]]) -> list[Outcome]:
        """Compare ``(gold, extracted)`` pairs in sandbox workers, in chunks, with the per-item deadline.

        Pairs go out in chunks of up to ``config.chunk_size`` (smaller when there are few pairs, so every
        executor slot gets work); one fork then serves several comparisons. A chunk runs under the per-item
        deadline; its worker prints each verdict as soon as it has it. Items a chunk did not answer (it was
        killed at the deadline or by a resource limit, or crashed) are run again *alone*, each with the full
        deadline, so an item is ``timeout`` only when it passed the deadline by itself. Items of a chunk the
        executor answered ``internal`` (after the retries) are ``verifier_error``.
        """
        outcomes: list[Outcome | None] = [None] * len(pairs)
        size = max(1, min(self.config.chunk_size, math.ceil(len(pairs) / _parallelism(executor))))
        chunks = [list(range(i, min(i + size, len(pairs)))) for i in range(0, len(pairs), size)]
        results = await self._run_requests(executor, [self._request([pairs[i] for i in c]) for c in chunks])
        alone: list[int] = []
        for chunk, result in zip(chunks, results):
            if len(chunk) == 1:
                outcomes[chunk[0]] = _solo_outcome(result)
                continue
            verdicts = parse_worker_output(result.stdout)
            for position, index in enumerate(chunk):
                verdict = verdicts.get(position)
                if verdict is not None:
                    correct = verdict["correct"] and verdict["status"] == "ok"
                    outcomes[index] = (verdict["status"], correct, verdict["detail"], verdict["seconds"])
                elif result.status == "internal":
                    outcomes[index] = _solo_outcome(result)
                else:
                    alone.append(index)
        if alone:
            solo = await self._run_requests(executor, [self._request([pairs[i]]) for i in alone])
            for index, result in zip(alone, solo):
                outcomes[index] = _solo_outcome(result)
        return [o if o is not None else ("verifier_error", False, "no outcome", 0.0) for o in outcomes]

    async def _symbolic(self, pairs: list[tuple[str, str]]) -> list[Outcome]:
        """:meth:`_compare` on the configured executor, or on the shared default one on the background loop."""
        if self.executor is not None:
            return await self._compare(self.executor, pairs)

        async def on_background() -> list[Outcome]:
            try:
                executor = await _get_default_executor()
            except Exception as exc:  # noqa: BLE001 - a missing or broken sandbox is a verifier error
                return [("verifier_error", False, f"no default executor: {exc!r}"[:300], 0.0) for _ in pairs]
            return await self._compare(executor, pairs)

        background = _background()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:  # pragma: no cover - only reached through the sync API
            running = None
        if running is background.loop:
            return await on_background()
        return await asyncio.wrap_future(background.submit(on_background()))

    # ------------------------------------------------------------------------------------------- API
    def _prepare(self, items: Iterable[Any]) -> tuple[list[Verdict | None], list[Pending]]:
        """Extraction and fast paths for every item: decided verdicts, and (index, gold, extracted, seconds
        spent, read gold, read answer) of the items that need the symbolic path."""
        coerced = [VerifyItem.coerce(item) for item in items]
        verdicts: list[Verdict | None] = [None] * len(coerced)
        pending: list[Pending] = []
        for i, item in enumerate(coerced):
            start = time.perf_counter()
            try:
                verdict, extracted, gold, pair = self._fast(item)
            except Exception as exc:  # noqa: BLE001 - grading raised on this answer: reward 0 for it, not the batch
                verdict, extracted, gold, pair = _bug_verdict(item, "answer reading", exc), None, "", None
            elapsed = time.perf_counter() - start
            if verdict is not None:
                verdict.duration_s = elapsed
                verdicts[i] = verdict
            else:
                read_gold, read_pred = pair or (gold, extracted or "")
                pending.append((i, gold, extracted or "", elapsed, read_gold, read_pred))
        return verdicts, pending

    async def _control_timeouts(self, pairs: list[tuple[str, str]], outcomes: list[Outcome]) -> list[Outcome]:
        """Whose fault a failed comparison is (:mod:`tirl.algo.infra`, "the rule"): each ``timeout`` and each
        ``verifier_error`` (the worker failed) is followed by a control comparison of its reference with itself
        under the same deadline. If the control succeeds (``ok``), the verifier works for this reference and
        the answer was the cause: ``answer_timeout`` / ``answer_error`` (the model's, never masked); otherwise
        the outcome stands (the reference or the machine: infrastructure, masked). A machine loaded enough to
        time out an ordinary answer is likely to time out its control too, which keeps the attribution on the
        safe side."""
        charged = {"timeout": "answer_timeout", "verifier_error": "answer_error"}
        failed = [i for i, outcome in enumerate(outcomes) if outcome[0] in charged]
        if not failed or not self.config.timeout_control:
            return outcomes
        controls = await self._symbolic([(pairs[i][0], pairs[i][0]) for i in failed])
        outcomes = list(outcomes)
        for i, (status, _, _, seconds) in zip(failed, controls):
            if status == "ok":
                first, _, detail, spent = outcomes[i]
                cause = "the slow part" if first == "timeout" else "what made the comparison fail"
                outcomes[i] = (
                    charged[first],
                    False,
                    f"{detail}; the reference compared with itself in {seconds:.2f}s: the answer is {cause}",
                    spent,
                )
        return outcomes

    async def _complete(self, verdicts: list[Verdict | None], pending: list[Pending]) -> list[Verdict]:
        """Run the symbolic items, fill in their verdicts and record every verdict in ``stats``."""
        if pending:
            pairs = [(read_gold, read_pred) for *_, read_gold, read_pred in pending]
            try:
                outcomes = await self._control_timeouts(pairs, await self._symbolic(pairs))
            except Exception as exc:  # noqa: BLE001 - executors and workers answer, never raise; be safe anyway
                outcomes = [(BUG_STATUS, False, bug_detail("the symbolic comparison", exc), 0.0)] * len(pairs)
            for (i, gold, extracted, elapsed, _, _), (status, correct, detail, seconds) in zip(pending, outcomes):
                verdicts[i] = Verdict(
                    correct=correct,
                    status=status,  # type: ignore[arg-type]  # a VerifyStatus, read back as str
                    extracted=extracted,
                    gold=gold,
                    path="symbolic",
                    duration_s=elapsed + seconds,
                    detail=detail,
                )
        final = [v for v in verdicts if v is not None]
        for verdict in final:
            self.stats.record(verdict)
        return final

    async def averify_batch(self, items: Iterable[Any]) -> list[Verdict]:
        """Verify many items concurrently; verdicts in the order of ``items``.

        Args:
            items: :class:`~tirl.reward.types.VerifyItem` objects, ``(response, gold)`` pairs or dicts with
                ``response``, ``gold`` and optionally ``answer`` (an already extracted answer).

        Returns:
            One :class:`~tirl.reward.types.Verdict` per item; ``duration_s`` is the item's own time (its
            extraction and fast paths, plus its execution time in the worker). Never raises for item content.

        Raises:
            TypeError: an item has none of the accepted shapes.
        """
        coerced = [VerifyItem.coerce(item) for item in items]
        size = sum(len(text) for it in coerced for text in (it.response, it.gold, it.answer) if isinstance(text, str))
        if size > INLINE_PREPARE_CHARS:
            # Extraction and fast paths are linear but not free (about 0.3 s per MiB of response): off the
            # caller's loop, so that a server keeps answering health probes and other requests meanwhile.
            verdicts, pending = await asyncio.to_thread(self._prepare, coerced)
        else:
            verdicts, pending = self._prepare(coerced)
        return await self._complete(verdicts, pending)

    async def averify(self, response_text: str | None, gold: str) -> Verdict:
        """Verify one response (async). See :meth:`averify_batch`."""
        return (await self.averify_batch([VerifyItem(response_text, gold)]))[0]

    def verify_batch(self, items: Iterable[Any]) -> list[Verdict]:
        """Sync :meth:`averify_batch`; callable from any thread, also while an event loop runs in it.

        Batches that need no symbolic comparison are decided in the calling thread.
        """
        verdicts, pending = self._prepare(items)
        if not pending:
            return _run_inline(self._complete(verdicts, pending))
        return _background().run(self._complete(verdicts, pending))

    def verify(self, response_text: str | None, gold: str) -> Verdict:
        """Sync verification of one response. See :meth:`averify_batch`."""
        return self.verify_batch([VerifyItem(response_text, gold)])[0]

    async def acheck_references(self, golds: Sequence[str]) -> list[str | None]:
        """Why each reference answer cannot be parsed, or None when it can (for reporting bad data up front).

        A reference the integer policy reads is parsable; the others are compared, through the normal path,
        with an answer that matches no reference (:data:`REFERENCE_PROBE`), so a reference that reads as no
        single value or that math-verify cannot parse comes back ``unparsable_gold``. The verdicts go to a
        private :class:`VerifierStats` (unparsable ones are still logged).

        Returns:
            One entry per reference, in order: the ``detail`` of its ``unparsable_gold`` verdict, else None.
        """
        results: list[str | None] = [None] * len(golds)
        todo = []
        for i, gold in enumerate(golds):
            if not isinstance(gold, str) or not gold.strip():
                results[i] = "empty or non-string reference"
            elif _gold_view(gold, None)[1] is None:
                todo.append(i)
        probe = Verifier(self.executor, self.config, VerifierStats(), self.protocol_config)
        verdicts = await probe.averify_batch([VerifyItem(None, golds[i], answer=REFERENCE_PROBE) for i in todo])
        for i, verdict in zip(todo, verdicts):
            if verdict.status == "unparsable_gold":
                results[i] = verdict.detail or "unparsable"
        return results


#: An answer no reference equals (``Verifier.acheck_references`` compares every reference with it). It holds
#: no hedge word (:func:`tirl.reward.forms.commitment_problem`), so it reaches the reference's parsing.
REFERENCE_PROBE = "\\text{tirl: a reference check that equals nothing}"


def _run_inline(coro: Any) -> Any:
    """Drive a coroutine that never suspends (no symbolic items) to completion in the calling thread."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("coroutine suspended; it needs an event loop")


def verify(
    response_text: str | None,
    gold: str,
    *,
    executor: CodeExecutor | None = None,
    config: VerifierConfig | None = None,
    stats: VerifierStats | None = None,
    protocol_config: ProtocolConfig | None = None,
) -> Verdict:
    """Verify one response against its reference answer; the reward is ``verdict.reward``.

    Args:
        response_text: the model's response (a turn or a whole trajectory's text).
        gold: the reference answer.
        executor: where symbolic comparisons run (None: the shared default ``LocalSandbox``).
        config: policies and the per-item deadline.
        stats: counters to record into (None: :func:`default_stats`).
        protocol_config: answer-extraction settings.

    Returns:
        The :class:`~tirl.reward.types.Verdict`. Never raises for any text; safe from any thread.
    """
    return Verifier(executor=executor, config=config, stats=stats, protocol_config=protocol_config).verify(
        response_text, gold
    )
