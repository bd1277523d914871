"""Bounded-staleness asynchronous rollouts (issue 42): admission control and the step's problem order.

``rollout.max_staleness: k`` (0 = synchronous, the default; nothing here runs then). With k > 0 the groups of
steps n+1..n+k are generated on the inference server(s) while step n updates.

**Versions.** The policy version is the trainer's ``global_step``, i.e. counted in *optimizer* steps (never in
rollout batches, which would hide lag when one batch is split over several optimizer steps; tirl takes one
optimizer step per RL step, ``steps_per_generation`` = gradient accumulation). A batch's version is the version
of the weights the generator held when the batch was *admitted* (started); the batch of step s is trained when
the trainer is at version s, so its staleness is ``s - version``.

**Admission control** (:class:`StalenessProducer`): the batch of step s is started only when
``s - served_version <= k``; a batch that would exceed the bound is not started (never started and dropped
later). Batches are trained in step order, i.e. oldest first, and every admitted batch is trained: nothing that
finished is dropped, so a problem whose multi-turn rollout is slow is trained exactly as often as a fast one
(dropping or cancelling stale rollouts, as TRL's async trainer, open-instruct and prime-rl do, trains on fast,
short, easy problems).

**A trajectory in flight across a weight push finishes on the version it was admitted with.** New weights are
pushed to the server(s) only when no admitted batch is still generating; until then the servers keep the older
weights and admission counts against that older version, so the bound holds either way. Why not re-admit it
under the newer version: a restarted trajectory throws its work away, and the trajectories most often in flight
at a push are the long ones, so restarting is the same length bias as dropping. Why not let it continue on the
new weights: the server's KV cache of its prefix was computed with the old weights, so its later tokens would be
sampled from no policy the trainer can score (its per-token log-prob would be neither version's).

With k = 1 nothing admitted is in flight when step n's batch is taken (the bound admits at most one batch ahead),
so the push happens every step as in the synchronous path. With k >= 2 a push is deferred while an older batch
still generates.

**Where the step's problems come from.** TRL hands the rollout function step n's prompts only at step n, but
step n+1's must be known while step n updates. With k > 0 the rollout function therefore draws each step's
problems from :func:`planned_problems` (a seeded permutation per epoch, a function of the step, the rank and the
seed: resumable and independent of timing), and uses TRL's prompts only for their count.

The importance correction of stale tokens and the lag metrics are :mod:`tirl.algo.staleness`; the TRL glue
that drives the producer is :mod:`tirl.train.rollout_func`.

Imports nothing of tirl's (threads and futures only).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


def planned_problems(
    problems: Sequence[T], step: int, groups: int, *, rank: int = 0, world: int = 1, seed: int = 0
) -> list[T]:
    """The ``groups`` problems rank ``rank`` of ``world`` trains at RL step ``step`` (0-based) when k > 0.

    Every epoch is one seeded permutation of ``problems`` (seed and epoch number); the step takes the next
    ``groups * world`` of the concatenated epochs, and each rank its own consecutive ``groups``. A function of its
    arguments only, so a resumed run continues the same order and the producer can ask for any future step.

    Raises:
        ValueError: no problems, or ``groups < 1``.
    """
    if not problems or groups < 1:
        raise ValueError("planned_problems needs problems and groups >= 1")
    n = len(problems)
    start = (step * world + rank) * groups
    out = []
    for pos in range(start, start + groups):
        epoch, i = divmod(pos, n)
        order = list(range(n))
        random.Random(f"tirl-async-order/{seed}/{epoch}").shuffle(order)
        out.append(problems[order[i]])
    return out


@dataclass
class Batch(Generic[T]):
    """One admitted step's generation.

    Attributes:
        step: the RL step (0-based ``global_step``) that trains it.
        version: the policy version (optimizer steps) of the weights that generate it.
        future: its result (what the producer's ``generate`` returned).
        started_s, finished_s: ``time.perf_counter()`` at admission and when it finished (None while running).
    """

    step: int
    version: int
    future: Future[T]
    started_s: float
    finished_s: float | None = None


@dataclass
class Taken(Generic[T]):
    """What :meth:`StalenessProducer.take` hands back.

    Attributes:
        result: the batch's result.
        step, version: as in :class:`Batch`; ``step - version`` is its staleness (0..k).
        waited_s: how long the trainer waited for it.
        generation_s: how long its generation ran.
        saved_s: the part of the generation the trainer did not wait for (``generation_s - waited_s``, >= 0):
            the time the overlap saved this step.
    """

    result: T
    step: int
    version: int
    waited_s: float
    generation_s: float
    saved_s: float

    @property
    def staleness(self) -> int:
        """Optimizer steps between the weights that generated the batch and the ones that train on it."""
        return self.step - self.version


@dataclass
class StalenessProducer(Generic[T]):
    """Admission control for rollouts at most ``max_staleness`` optimizer steps behind the trainer.

    Called on the trainer's thread once per RL step (:meth:`take`); generation runs on up to ``max_staleness``
    background threads (a generation call blocks on the servers, so a thread per admitted batch is enough).

    Args:
        generate: ``(step) -> result``: generate (and score) the batch of ``step`` on the weights the servers hold
            now. Runs on a background thread; must not touch the trainer's model.
        push: ``() -> None``: send the trainer's current weights to the servers (on the trainer's thread,
            between steps: the model is not being updated).
        max_staleness: k >= 1.
        max_steps: no batch is admitted for a step at or past it (it would never be trained).
        agree: ``(flag) -> flag on every process``: with several training processes, whether every one has
            nothing generating (an all-reduce); the push may be a collective (a ZeRO-3 or FSDP gather), so all
            processes must decide it together. Identity for one process.

    Attributes:
        served_version: the version the servers hold (None before the first push).
        admitted: ``(step, version)`` of every admission, in order (for tests and logs).
    """

    generate: Callable[[int], T]
    push: Callable[[], None]
    max_staleness: int
    max_steps: int
    agree: Callable[[bool], bool] = bool
    served_version: int | None = None
    admitted: list[tuple[int, int]] = field(default_factory=list)
    _batches: dict[int, Batch[T]] = field(default_factory=dict)
    _pool: ThreadPoolExecutor | None = None

    def __post_init__(self) -> None:
        if self.max_staleness < 1:
            raise ValueError("StalenessProducer needs max_staleness >= 1 (0 is the synchronous path)")

    # -- on the trainer's thread ---------------------------------------------------------------------------------
    def take(self, step: int, version: int) -> Taken[T]:
        """The batch of RL step ``step``, the trainer being at policy version ``version`` (its ``global_step``).

        Starts it now when it was not admitted before (the first step, a resumed run), waits for it, pushes the
        current weights when nothing older is generating, and admits the following steps the bound allows.

        Raises:
            RuntimeError: the batch was admitted more than ``max_staleness`` versions behind ``version`` (never
                expected: admission checks it), or a step is taken twice / out of order.
            Exception: whatever the batch's ``generate`` raised.
        """
        batch = self._batches.pop(step, None)
        if any(s < step for s in self._batches):
            raise RuntimeError(f"step {step} taken before older admitted steps {sorted(self._batches)}")
        if batch is None:
            # nothing admitted for it (the run's first step, or a resumed one): synchronous, on fresh weights
            for older in list(self._batches.values()):
                older.future.exception()  # wait: never push across a running batch
            self._push(version)
            batch = self._admit(step)
        t0 = time.perf_counter()
        result = batch.future.result()
        waited = time.perf_counter() - t0
        if version - batch.version > self.max_staleness:
            raise RuntimeError(
                f"step {step} was generated by version {batch.version}, {version - batch.version} optimizer steps "
                f"behind the trainer: over rollout.max_staleness={self.max_staleness}"
            )
        idle = self.agree(all(b.future.done() for b in self._batches.values()))
        if step + 1 < self.max_steps and idle:
            self._push(version)  # between steps, nothing in flight: the servers take this step's weights
        self._admit_ahead(step)
        generation = (batch.finished_s or time.perf_counter()) - batch.started_s
        return Taken(result, step, batch.version, waited, generation, max(0.0, generation - waited))

    def wait_idle(self) -> None:
        """Wait until no admitted batch is generating (the colocated vLLM's weight push waits here: TRL pushes at
        the start of every step, and a push must never land on a running batch). Errors stay with their batch."""
        for b in list(self._batches.values()):
            b.future.exception()

    def in_flight(self) -> list[int]:
        """The admitted steps still generating."""
        return sorted(s for s, b in self._batches.items() if not b.future.done())

    def close(self) -> None:
        """Wait for the batches in flight (their generation cannot be cut short on a server) and stop the
        threads. Idempotent."""
        for b in list(self._batches.values()):
            b.future.exception()
        self._batches.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    # -- internals -------------------------------------------------------------------------------------------------
    def _push(self, version: int) -> None:
        if self.served_version != version:
            self.push()
            self.served_version = version

    def _admit_ahead(self, step: int) -> None:
        """Admit steps step+1.. while ``s - served_version <= k`` (the bound) and ``s < max_steps``."""
        assert self.served_version is not None
        s = step + 1
        while s < self.max_steps and s - self.served_version <= self.max_staleness:
            if s not in self._batches:
                self._batches[s] = self._admit(s)
            s += 1

    def _admit(self, step: int) -> Batch[T]:
        assert self.served_version is not None
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.max_staleness, thread_name_prefix="tirl-async-rollout")
        batch: Batch[T] = Batch(step, self.served_version, Future(), time.perf_counter())
        self.admitted.append((step, self.served_version))

        def run() -> T:
            try:
                return self.generate(step)
            finally:
                batch.finished_s = time.perf_counter()

        batch.future = self._pool.submit(run)
        return batch


__all__ = ["Batch", "StalenessProducer", "Taken", "planned_problems"]
