"""The GRPO-RoC ``rollout_func`` for TRL's ``GRPOTrainer``: sample 2G, verify, keep G, fill TRL's slots.

How TRL forms groups (trl 1.16, read from ``grpo_trainer.py``, ``trainer/utils.py`` and accelerate's
``BatchSamplerShard``), and why the G kept trajectories of one problem stay together:

1. ``RepeatSampler(mini_repeat_count=num_generations, batch_size=generation_batch_size // num_generations)``
   yields each problem index ``num_generations`` (= G) times in a row, blocks aligned at multiples of G.
2. The train dataloader's batch is the *local generation batch*, ``per_device_train_batch_size *
   steps_per_generation`` rows; accelerate hands batch ``k`` of the sampler stream to process
   ``k % num_processes``. So when the local generation batch is a multiple of G, which
   :meth:`tirl.train.config.RLConfig.validate` enforces (``problems_per_step`` divisible by the number of
   processes), every process receives whole groups: G consecutive copies of each of its problems.
3. ``_generate`` calls ``rollout_func(prompts, trainer)`` with exactly those local rows. For each block of G
   identical prompts this function generates ``oversample * G`` trajectories of the one problem, verifies them,
   selects G with RoC and returns them in the block's G slots, so TRL sees exactly G per unique prompt.
4. TRL gathers rewards over processes in process order and normalises them with ``view(-1, G)``; because every
   process's rows are whole, aligned groups, each view row is one problem. tirl nevertheless computes the
   advantage itself on each kept group (:mod:`tirl.algo.advantages`, paper Eq. 7 with masking and a std floor)
   and :class:`tirl.train.trainer.RocGRPOTrainer` puts it in place of TRL's; the largest difference from TRL's own
   value is logged as ``check/adv_diff_vs_trl`` (close to 0 for binary rewards when grouping agrees).

A trajectory touched by an infrastructure failure (a tool call answered ``internal``, an engine error, a
verifier crash or deadline; :mod:`tirl.algo.infra`) is masked: its reward is None, so RoC never keeps it and
its group's mean and spread leave it out; ``infra/masked*`` count them each step.

Slots that cannot be filled with a real kept trajectory (a group dropped by ``drop_all_equal``, fewer than G
scorable trajectories, an empty response; field case F80) get a one-token placeholder completion (the
end-of-turn id) with ``env_mask`` 0, reward None and advantage 0: it adds no token to the loss and no gradient.

Outputs per slot: ``prompt_ids``, ``completion_ids`` (model and tool tokens, never re-tokenised),
``logprobs`` (sampling log-probs, 0.0 on tool tokens), ``env_mask`` (1 = model token, 0 = tool/injected),
``tirl_reward`` (passed through to :func:`passthrough_reward`), ``tirl_advantage``, and ``tirl_metrics``.

With ``rollout.max_staleness: k > 0`` (issue 42) the step's batch comes from a
:class:`tirl.rollout.staleness.StalenessProducer` instead: generated and scored on a background thread by a
:class:`ServedSource` (inference servers, colocated vLLM) up to k optimizer steps earlier, for the problems of
:func:`tirl.rollout.staleness.planned_problems` (TRL's prompts give only their count); selection, advantages, slots,
masking, the audit, the watchdog and the trajectory log below are the same code on it. k = 0 is the synchronous
path, unchanged.

This module does not build the trainer or the dataset (:mod:`tirl.train.rl`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tirl.algo.advantages import group_advantages
from tirl.algo.infra import control_metrics, infra_cause, masked_metrics
from tirl.algo.metrics import outcome_metrics, step_metrics
from tirl.algo.roc import Candidate, Selection, candidate
from tirl.algo.selection import get_rule, rule_name
from tirl.algo.staleness import lag_metrics
from tirl.data.problem import Problem
from tirl.protocol.audit import audit_metrics
from tirl.protocol.types import Trajectory, token_fields
from tirl.reward.scorer import Score, Scorer
from tirl.rollout.agent_loop import AgentLoopConfig
from tirl.rollout.staleness import StalenessProducer, Taken, planned_problems
from tirl.runs.trajectories import write_step_log
from tirl.train.config import RLConfig
from tirl.train.watchdog import RunWatchdog

logger = logging.getLogger(__name__)

METRICS_KEY = "tirl_metrics"
REWARD_KEY = "tirl_reward"
ADVANTAGE_KEY = "tirl_advantage"


# --------------------------------------------------------------------------------------------------------------
# where trajectories come from (how they are scored: tirl.reward.scorer)


class TrajectorySource(Protocol):
    """Generates trajectories with the current policy."""

    def generate(
        self, problems: Sequence[Problem], samples_per_problem: int, *, seed: int, trainer: Any
    ) -> list[Trajectory]:
        """``samples_per_problem`` trajectories per problem, flat and problem-major (group g first)."""
        ...


class ServedSource(TrajectorySource, Protocol):
    """A :class:`TrajectorySource` whose generator holds its own copy of the policy (an inference server), so that
    generation can overlap the update (``rollout.max_staleness > 0``; :mod:`tirl.rollout.staleness`)."""

    def push_policy(self, trainer: Any) -> None:
        """Send the trainer's current weights (or adapter) to the generator; on the trainer's thread, between
        steps."""
        ...

    def generate_served(self, problems: Sequence[Problem], samples_per_problem: int, *, seed: int) -> list[Trajectory]:
        """As :meth:`TrajectorySource.generate`, on the weights last pushed, never touching the trainer's model
        (it runs on a background thread while the trainer updates)."""
        ...


# --------------------------------------------------------------------------------------------------------------
# the rollout function


@dataclass
class RolloutStats:
    """What the last call did (for tests and logging)."""

    trajectories: list[Trajectory] = field(default_factory=list)
    selections: list[Selection] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    slot_sources: list[int | None] = field(default_factory=list)  # trajectory index per slot, None = placeholder
    infra: list[str | None] = field(default_factory=list)  # per trajectory: what masked it (tirl.algo.infra)


class RocRolloutFunc:
    """``rollout_func(prompts, trainer) -> dict`` for ``trl.GRPOTrainer`` implementing GRPO-RoC.

    Args:
        config: the run's configuration (group size, oversampling, RoC switches, advantage settings).
        problems: the training problems; the dataset's ``prompt`` column is each problem's text, which is how a
            prompt is mapped back to its reference answer.
        source: generates trajectories with the current policy.
        scorer: outcome rewards.
        pad_token_id: the id of the placeholder completion (the end-of-turn token).

    Raises (on call):
        RuntimeError: the prompts do not come in aligned blocks of G identical prompts (groups would span
            processes; see the module docstring), or a prompt is not a known problem.
        AssertionError: a kept trajectory whose ``env_mask``/``logprobs`` length differs from its completion
            (field case F86; never expected, since :class:`Trajectory` checks it on construction).
    """

    def __init__(
        self,
        config: RLConfig,
        problems: Sequence[Problem],
        source: TrajectorySource,
        scorer: Scorer,
        pad_token_id: int,
    ) -> None:
        self.config = config
        self.source = source
        self.scorer = scorer
        self.pad_token_id = int(pad_token_id)
        self.by_prompt: dict[str, Problem] = {}
        for p in problems:
            self.by_prompt.setdefault(p.problem, p)
        self.problems = list(self.by_prompt.values())  # the order max_staleness > 0 plans steps from
        self.producer: StalenessProducer[Any] | None = None
        if config.rollout.max_staleness > 0 and not (
            hasattr(source, "generate_served") and getattr(source, "serves_own_weights", True)
        ):
            raise ValueError(
                f"rollout.max_staleness={config.rollout.max_staleness} needs an inference server to generate on "
                "while the trainer updates, and this run generates in process (rollout.launch_server=auto found no "
                "vLLM?): set rollout.server_url or rollout.launch_server=true, or rollout.max_staleness=0"
            )
        self.last = RolloutStats()
        self.calls = 0
        self.watchdog = RunWatchdog(config.watchdog)
        self.__name__ = "tirl_roc_rollout"

    # -- helpers -----------------------------------------------------------------------------------------------
    def _groups(self, prompts: Sequence[Any]) -> list[Problem]:
        g = self.config.rollout.group_size
        if len(prompts) % g:
            raise RuntimeError(
                f"rollout_func got {len(prompts)} prompts, not a multiple of the group size {g}: groups would be "
                "split across processes (problems_per_step must be a multiple of the number of processes)"
            )
        out = []
        for start in range(0, len(prompts), g):
            block = [_prompt_text(p) for p in prompts[start : start + g]]
            if any(b != block[0] for b in block):
                raise RuntimeError(
                    f"prompts {start}..{start + g - 1} are not {g} copies of one problem: TRL's groups are not "
                    "aligned with this process's batch"
                )
            problem = self.by_prompt.get(block[0])
            if problem is None:
                raise RuntimeError(f"prompt is not a known training problem: {block[0][:80]!r}")
            out.append(problem)
        return out

    def _rng(self, step: int, problem_id: str) -> random.Random:
        # per step and problem, not per process: a group is selected the same whichever rank holds it, so a run
        # does not depend on the number of processes (docs/scale.md, "Sharded training on CPU")
        return random.Random(f"roc/{self.config.seed}/{step}/{problem_id}")

    # -- the call ----------------------------------------------------------------------------------------------
    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        """One RL step's rollout: the step's problems from TRL's prompts, ``n`` trajectories per problem (2G with
        an oversampling rule, else G), scored; infrastructure failures masked; G kept per problem by the rule,
        with their advantages, in TRL's slots; the step's metrics, the watchdog and the trajectory log.

        Returns:
            ``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask``, :data:`REWARD_KEY`,
            :data:`ADVANTAGE_KEY` (one entry per prompt, in order) and :data:`METRICS_KEY` (a dict).
        """
        cfg = self.config
        rule = get_rule(rule_name(cfg.roc))  # tirl.algo.selection: roc_paper, roc_release, random, all
        n = cfg.rollout.samples_per_problem if rule.oversamples else cfg.rollout.group_size
        step = int(getattr(getattr(trainer, "state", None), "global_step", 0) or 0)
        (problems, trajectories, scores, t_rollout, t_verify), async_metrics = self._step_batch(
            self._groups(prompts), n, step, trainer
        )
        # infrastructure failures (not the model's) are masked: no reward, never kept, out of the group stats
        causes = [
            infra_cause(t, s.status, mask_verifier_timeouts=cfg.rollout.mask_verifier_timeouts)
            for t, s in zip(trajectories, scores)
        ]
        rewards = [None if c else s.reward for s, c in zip(scores, causes)]
        candidates: list[Candidate] = [candidate(t, r, cfg.roc) for t, r in zip(trajectories, rewards)]
        out, selections, slot_sources = self._fill_slots(problems, n, step, rule, trajectories, rewards, candidates)

        metrics = step_metrics(trajectories, rewards, candidates, cfg.rollout.group_size, selections)
        metrics.update(self._source_metrics())
        metrics.update(masked_metrics(causes))
        metrics.update(control_metrics(trajectories, [s.status for s in scores]))
        metrics.update({"time/rollout_s": t_rollout, "time/verify_s": t_verify})
        metrics.update(outcome_metrics(trajectories, [s.status for s in scores]))
        metrics.update(async_metrics)
        metrics.update(audit_metrics(trajectories, cfg.protocol))  # counted, never rewarded (issue 23)
        self.last = RolloutStats(trajectories, selections, metrics, slot_sources, causes)
        self.calls += 1
        self.watchdog.observe(step + 1, metrics)
        if cfg.logging.log_trajectories:
            process_index = int(getattr(getattr(trainer, "accelerator", None), "process_index", 0) or 0)
            self._log_trajectories(
                step, process_index, problems, n, trajectories, scores, candidates, selections, rule.name, causes
            )
        result: dict[str, Any] = dict(out)
        result[METRICS_KEY] = metrics  # a non-list extra field: TRL copies it into every input row
        return result

    def _step_batch(
        self, problems: list[Problem], n: int, step: int, trainer: Any
    ) -> tuple[tuple[list[Problem], list[Trajectory], list[Score], float, float], dict[str, float]]:
        """The step's sampled and scored batch (:meth:`_sample`'s tuple) and its ``stale/``/overlap metrics.

        ``max_staleness`` 0: generated now on the trainer's weights for ``problems``, no metrics. Otherwise the
        batch the producer admitted up to k versions ago (:mod:`tirl.rollout.staleness`), for the planned
        problems (TRL's prompts give only their count)."""
        if self.config.rollout.max_staleness == 0:
            return self._sample(problems, n, step, trainer), {}
        taken = self._producer(trainer, len(problems), n).take(step, step)
        return taken.result, self._async_metrics(taken, taken.result[1])

    def _fill_slots(
        self,
        problems: Sequence[Problem],
        n: int,
        step: int,
        rule: Any,
        trajectories: Sequence[Trajectory],
        rewards: Sequence[float | None],
        candidates: Sequence[Candidate],
    ) -> tuple[dict[str, list[Any]], list[Selection], list[int | None]]:
        """Select G of each problem's ``n`` with ``rule`` and fill TRL's G slots per problem.

        Returns:
            ``(columns, selections, slot_sources)``: the slot columns (``prompt_ids``, ``completion_ids``,
            ``logprobs``, ``env_mask``, rewards, advantages; G entries per problem), one selection per problem,
            and per slot the trajectory index it holds (None: a placeholder, see the module docstring).
        """
        cfg, g = self.config, self.config.rollout.group_size
        out: dict[str, list[Any]] = {
            k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask", REWARD_KEY, ADVANTAGE_KEY)
        }
        selections: list[Selection] = []
        slot_sources: list[int | None] = []
        for gi in range(len(problems)):
            base = gi * n
            sel = rule.select(candidates[base : base + n], g, self._rng(step, problems[gi].id), cfg.roc)
            selections.append(sel)
            kept = [base + i for i in sel.indices]
            # an empty response (no model token) carries no loss and must not move the group's mean and spread
            adv = group_advantages(
                [None if _empty(trajectories[i]) else rewards[i] for i in kept],
                eps=cfg.optim.adv_eps,
                std_floor=cfg.optim.std_floor,
            )
            for slot in range(g):
                idx = kept[slot] if slot < len(kept) else None
                traj = trajectories[idx] if idx is not None else None
                if traj is None or _empty(traj):
                    # placeholder: one masked token, no reward, no advantage (F80: nothing is placed on it)
                    prompt = traj.prompt_ids if traj is not None else list(trajectories[base].prompt_ids)
                    row = (prompt, [self.pad_token_id], [0.0], [0], None if idx is None else rewards[idx], 0.0)
                    idx = None
                else:
                    ids, mask = list(traj.response_ids), list(traj.loss_mask)
                    logps = list(traj.logprobs) if traj.logprobs else [0.0] * len(ids)
                    assert len(mask) == len(ids) == len(logps), (  # F86
                        f"trajectory {idx}: {len(ids)} completion ids, {len(mask)} mask entries, {len(logps)} log-probs"
                    )
                    floats, ints = [float(x) for x in logps], [int(m) for m in mask]
                    row = (list(traj.prompt_ids), ids, floats, ints, rewards[idx], adv[slot])
                for column, value in zip(out.values(), row, strict=True):
                    column.append(value)
                slot_sources.append(idx)
        return out, selections, slot_sources

    def _source_metrics(self) -> dict[str, float]:
        """The source's counters of the last rollout: ``sandbox/*`` (a sandbox service's failovers),
        ``sched/*`` (several servers), and the engine's ``time/{prefill,decode,sync}_s`` and
        ``engine/{prefill,decode}_tokens`` when it keeps them."""
        out: dict[str, float] = {}
        out.update(getattr(self.source, "last_sandbox_stats", None) or {})
        out.update(getattr(self.source, "last_scheduler_stats", None) or {})
        engine_stats = getattr(self.source, "last_engine_stats", None) or {}
        for key in ("prefill_s", "decode_s", "sync_s", "prefill_tokens", "decode_tokens"):
            if key in engine_stats:
                out[f"time/{key}" if key.endswith("_s") else f"engine/{key}"] = engine_stats[key]
        return out

    def _sample(
        self, problems: list[Problem], n: int, step: int, trainer: Any, *, generate: Callable[..., Any] | None = None
    ) -> tuple[list[Problem], list[Trajectory], list[Score], float, float]:
        """Generate ``n`` trajectories per problem and score them: ``(problems, trajectories, scores, rollout
        seconds, verification seconds)``. ``generate``: the source's ``generate_served`` (background thread,
        max_staleness > 0); None: its ``generate`` on the trainer's current weights (synchronous path)."""
        # one seed per step on every rank: the agent loop derives each trajectory's seed from it, the problem id
        # and the sample index, so a trajectory does not depend on the rank that samples it
        seed = random.Random(f"rollout/{self.config.seed}/{step}").getrandbits(31)
        t0 = time.perf_counter()
        if generate is None:
            trajectories = self.source.generate(problems, n, seed=seed, trainer=trainer)
        else:
            trajectories = generate(problems, n, seed=seed)
        t_rollout = time.perf_counter() - t0
        if len(trajectories) != len(problems) * n:
            raise RuntimeError(
                f"trajectory source returned {len(trajectories)} trajectories, expected {len(problems) * n}"
            )

        t0 = time.perf_counter()
        repeated = [p for p in problems for _ in range(n)]
        scores = self.scorer.score(trajectories, repeated)
        return problems, trajectories, scores, t_rollout, time.perf_counter() - t0

    def _producer(self, trainer: Any, groups: int, n: int) -> StalenessProducer[Any]:
        """The run's :class:`~tirl.rollout.staleness.StalenessProducer` (built on the first step): each batch is the
        planned problems of its step (:func:`~tirl.rollout.staleness.planned_problems`, this process's share),
        generated on the served weights and scored on a background thread."""
        if self.producer is None:
            accelerator = getattr(trainer, "accelerator", None)
            rank = int(getattr(accelerator, "process_index", 0) or 0)
            world = int(getattr(accelerator, "num_processes", 1) or 1)
            source: Any = self.source

            def generate(step: int) -> tuple[list[Problem], list[Trajectory], list[Score], float, float]:
                planned = planned_problems(self.problems, step, groups, rank=rank, world=world, seed=self.config.seed)
                return self._sample(planned, n, step, None, generate=source.generate_served)

            max_steps = int(getattr(getattr(trainer, "state", None), "max_steps", 0) or self.config.max_steps)
            self.producer = StalenessProducer(
                generate,
                lambda: source.push_policy(trainer),
                self.config.rollout.max_staleness,
                max_steps,
                agree=bool if world == 1 else (lambda flag: _on_every_rank(flag, accelerator)),
            )
        return self.producer

    def _async_metrics(self, taken: Taken[Any], trajectories: Sequence[Trajectory]) -> dict[str, float]:
        """``stale/lag_*`` (token-weighted staleness histogram, optimizer steps), the time the trainer waited
        for the batch and the generation time the overlap hid (``time/overlap_saved_s``)."""
        tokens = sum(t.num_model_tokens for t in trajectories)
        out = lag_metrics(taken.staleness, tokens, self.config.rollout.max_staleness)
        out["time/rollout_wait_s"] = taken.waited_s
        out["time/overlap_saved_s"] = taken.saved_s
        return out

    def close(self) -> None:
        """Wait for the batches still generating and stop the producer's threads (max_staleness > 0). Idempotent."""
        if self.producer is not None:
            self.producer.close()

    def _log_trajectories(
        self,
        step: int,
        process_index: int,
        problems: Sequence[Problem],
        n: int,
        trajectories: Sequence[Trajectory],
        scores: Sequence[Score],
        candidates: Sequence[Candidate],
        selections: Sequence[Selection],
        rule: str = "",
        causes: Sequence[str | None] = (),
    ) -> None:
        """Write every sampled trajectory of this step to ``output_dir/trajectories/step_NNNNN_rankR.jsonl``.

        One line per trajectory: step, group, problem text and reference, the RoC decision (``kept``,
        ``p_err``, ``p_format``, the group's selection status, mode and ``rule``), reward and verifier status, ``infra``
        (the infrastructure failure that masked it, :mod:`tirl.algo.infra`, or null), final
        answer, finish reason, per-turn records (text, tool calls with code, result and class, as in an eval
        run's ``turns``), ``tool_calls`` (classes) and the exact ``prompt_ids``/``response_ids``/``loss_mask``
        (read by ``tirl view`` and ``tirl analyze entropy``).
        """
        mode = self.config.roc.mode if self.config.roc.enabled else "off"

        def records() -> Iterator[dict[str, Any]]:
            for gi, problem in enumerate(problems):
                kept = set(selections[gi].indices)
                for j in range(n):
                    t, sc, c = trajectories[gi * n + j], scores[gi * n + j], candidates[gi * n + j]
                    yield {
                        "step": step + 1,
                        "rank": process_index,
                        "group": gi,
                        "problem_id": problem.id,
                        "problem": problem.problem,
                        "answer": problem.answer,
                        "sample": j,
                        "kept": j in kept,
                        "selection": selections[gi].status,
                        "roc_mode": mode,
                        "rule": rule,
                        "reward": sc.reward,
                        "verify_status": sc.status,
                        "final_answer": t.final_answer,
                        "infra": causes[gi * n + j] if causes else None,
                        "p_err": c.p_err,
                        "p_format": c.p_format,
                        "finish_reason": t.finish_reason,
                        "model_tokens": t.num_model_tokens,
                        "tool_calls": [rec.cls for rec in t.tool_call_records],
                        "turns": [dataclasses.asdict(turn) for turn in t.turns],
                        **token_fields(t),
                    }

        write_step_log(self.config.output_dir, step + 1, process_index, records())


def _on_every_rank(flag: bool, accelerator: Any) -> bool:
    """Whether ``flag`` holds on every training process (a gather: every process must call it)."""
    import torch

    gathered = accelerator.gather(torch.tensor([1.0 if flag else 0.0], device=accelerator.device))
    return bool(gathered.min().item() > 0.5)


def _empty(traj: Trajectory) -> bool:
    """A trajectory with no model-generated token (nothing to train on, nothing to judge)."""
    return not traj.response_ids or not any(traj.loss_mask)


def passthrough_reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
    """TRL reward function that returns the rewards the rollout function computed (``tirl_reward``).

    Also forwards the rollout's step metrics to TRL's metric log through the ``log_metric`` callback TRL
    passes to reward functions (averaged over processes, then logged to console/TensorBoard/W&B/JSONL).

    Returns:
        One reward per completion; None for unscorable or placeholder slots (TRL turns None into NaN, which its
        group statistics ignore and whose advantage is 0).
    """
    rewards = kwargs.get(REWARD_KEY)
    if rewards is None or len(rewards) != len(completions):
        raise ValueError(
            "passthrough_reward needs the 'tirl_reward' field from RocRolloutFunc for every completion; is the "
            "trainer using RocRolloutFunc as its rollout_func?"
        )
    log_metric = kwargs.get("log_metric")
    metrics = kwargs.get(METRICS_KEY)
    if log_metric is not None and metrics:
        first = metrics[0] if isinstance(metrics, list) else metrics
        for name, value in sorted(first.items()):
            log_metric(f"tirl/{name}", float(value))
    return [None if r is None else float(r) for r in rewards]


passthrough_reward.__name__ = "outcome"


def _prompt_text(prompt: Any) -> str:
    """The problem text of a dataset prompt: a plain string, or the last user message of a conversation."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        content = prompt[-1].get("content", "")
        return content if isinstance(content, str) else str(content)
    raise RuntimeError(f"unsupported prompt type {type(prompt).__name__}")


# --------------------------------------------------------------------------------------------------------------
# the default source: the agent loop on the trainer's current weights


ExecutorFactory = Callable[[], Any]


def default_executor_factory(config: RLConfig) -> ExecutorFactory:
    """A factory for the configured code executor (:func:`tirl.runtime.build_executor` of the recipe's
    ``sandbox:`` section)."""

    def make() -> Any:
        from tirl.runtime import build_executor

        return build_executor(config.sandbox)

    return make


class AgentLoopSource:
    """:class:`TrajectorySource` running ``tirl.rollout.agent_loop`` on the current policy.

    The pieces come from :mod:`tirl.runtime`: an :class:`~tirl.runtime.AgentRuntime` (one background event
    loop with the run's code executor and verifier, for the whole run) and the engine of
    :func:`~tirl.runtime.build_policy_engine`. With ``rollout.server_url`` the turns go to an inference server,
    which is sent the current LoRA adapter before every rollout (:mod:`tirl.train.server_policy`); with several,
    to the KV-aware rollout scheduler over them (:mod:`tirl.rollout.scheduler`), every server is sent the
    policy, a server that did not take it is taken out of rotation for the step (and put back once it takes
    one again), and the scheduler's per-step counters are logged (``sched/...``). Otherwise the
    engine wraps the trainer's model object itself (unwrapped from DDP/DeepSpeed with TRL's
    ``unwrap_model_for_generation``), so every step samples from the current weights; no copy is made. With
    ``use_vllm`` (GPU) it is a :class:`tirl.rollout.vllm_engine.VLLMEngine` on TRL's colocated vLLM instance,
    into which TRL has pushed the current weights before the rollout.

    Args:
        config: the run configuration (turn and token limits, sampling, tool limits).
        tokenizer: the policy's tokenizer.
        executor_factory: builds the code executor on first use (default from the recipe's ``sandbox:``).
        engine_factory: ``(model) -> Engine``; default :func:`tirl.runtime.build_policy_engine`.

    Attributes:
        runtime: the background loop with the executor and the verifier.
        context_window: the trajectories' context window in tokens (``rollout.context_window``; the trainer
            sets the model's ``max_position_embeddings`` when that is None).
        last_engine_stats: the engine's :class:`tirl.rollout.hf_engine.EngineStats` counters over the last
            :meth:`generate` (prefill and decode seconds and tokens), when the engine keeps them.
        last_scheduler_stats: with several servers, the scheduler's counters over the last :meth:`generate`
            (:meth:`tirl.rollout.scheduler.RolloutScheduler.step_stats`) and ``sched/synced``/``sched/sync_failed``
            (servers that took, or did not take, the step's policy).
    """

    def __init__(
        self,
        config: RLConfig,
        tokenizer: Any,
        executor_factory: ExecutorFactory | None = None,
        engine_factory: Callable[[Any], Any] | None = None,
    ) -> None:
        from tirl.runtime import AgentRuntime

        self.config = config
        self.tokenizer = tokenizer
        self.runtime = AgentRuntime(
            executor_factory or default_executor_factory(config),
            name="tirl-rl-loop",
            protocol=config.protocol,
            sandbox=config.sandbox,
            verifier=config.verifier,
        )
        self._engine_factory = engine_factory
        self._engine: Any = None
        self._checked = False
        self.context_window: int | None = config.rollout.context_window
        self.last_engine_stats: dict[str, float] = {}
        self.last_sandbox_stats: dict[str, float] = {}
        self.last_scheduler_stats: dict[str, float] = {}
        self._sync: Any = None
        # the run's name for the rollout's progress lines (tirl.train.progress); None: no lines
        self.progress_label: str | None = None

    def _agent_config(self) -> AgentLoopConfig:
        """The recipe's ``rollout`` agent-loop settings and ``protocol``, with the resolved context window."""
        return self.config.rollout.agent_loop_config(self.config.protocol, context_window=self.context_window)

    def _make_engine(self, model: Any, trainer: Any) -> Any:
        if self._engine_factory is not None:
            return self._engine_factory(model)
        from tirl.runtime import build_policy_engine

        r = self.config.rollout
        served = r.server_lora_name if self.config.server_sync_mode() == "adapter" else r.server_model_name
        scheduler = None
        if len(r.server_urls) > 1:
            from tirl.rollout.scheduler import SchedulerConfig

            scheduler = SchedulerConfig(
                policy=r.server_scheduler,
                capacity_tokens=r.server_kv_capacity,
                failover=r.server_failover,
                metrics_log=str(Path(self.config.output_dir) / "scheduler_metrics.jsonl"),
            )
        return build_policy_engine(
            model,
            batch_size=r.engine_batch_size,
            server_url=r.server_urls,
            server_lora_name=served,
            trainer=trainer,
            server_api=r.server_api,
            scheduler=scheduler,
        )

    def verify(self, items: Sequence[Any]) -> list[Any]:
        """Verdicts of ``tirl.reward.VerifyItem`` items on the run's executor and loop (what
        :class:`tirl.reward.scorer.VerifierScorer` calls)."""
        return self.runtime.verify(items)

    def generate(
        self, problems: Sequence[Problem], samples_per_problem: int, *, seed: int, trainer: Any
    ) -> list[Trajectory]:
        rows = list(problems)  # the agent loop takes Problems (group id: the problem id)
        with self._generation_model(trainer) as model:
            self._push(model, trainer)
            with self._progress(trainer, len(rows) * samples_per_problem) as progress:
                return self._run(rows, samples_per_problem, seed, progress)

    @property
    def serves_own_weights(self) -> bool:
        """Whether the generator holds its own copy of the policy (inference servers), so that generation can
        overlap the update (``rollout.max_staleness > 0``)."""
        r = self.config.rollout
        return bool(r.server_urls) or (self._engine_factory is None and r.use_vllm)

    def push_policy(self, trainer: Any) -> None:
        """Send the trainer's current weights (or adapter) to the servers (``max_staleness > 0``: on the trainer's
        thread, between steps, when no batch is generating; :class:`tirl.rollout.staleness.StalenessProducer`).
        Colocated vLLM: TRL has pushed them already at the start of the step (after
        :meth:`tirl.train.trainer.RocGRPOTrainer` waited for the batches generating), so this only builds the
        engine."""
        with self._generation_model(trainer) as model:
            self._push(model, trainer)

    def _generation_model(self, trainer: Any) -> Any:
        """A context yielding the trainer's model ready for generation (:class:`_policy_for_generation`), or None
        with TRL's colocated vLLM: it already holds the current weights (TRL syncs them before the rollout), so
        no unwrapping, in particular no ZeRO-3 parameter gather of the training model."""
        uses_vllm = self._engine_factory is None and getattr(getattr(trainer, "args", None), "use_vllm", False)
        return contextlib.nullcontext(None) if uses_vllm else _policy_for_generation(trainer)

    def generate_served(self, problems: Sequence[Problem], samples_per_problem: int, *, seed: int) -> list[Trajectory]:
        """:meth:`generate` on the weights the servers hold (last :meth:`push_policy`), on a background thread:
        never touches the trainer's model. The ``last_*_stats`` are this call's."""
        return self._run(list(problems), samples_per_problem, seed, None)

    def _push(self, model: Any, trainer: Any) -> None:
        """Build the engine on first use (or hand it the current model) and send the servers the policy."""
        if self._engine is None:
            self._engine = self._make_engine(model, trainer)
        elif model is not None and hasattr(self._engine, "set_model"):
            self._engine.set_model(model)
        scheduler = self._engine if hasattr(self._engine, "step_stats") else None
        if self.config.rollout.server_urls:
            if self._sync is None:
                from tirl.train.server_policy import ServerPolicySync

                self._sync = ServerPolicySync(
                    self.config.rollout.server_urls,
                    Path(self.config.output_dir) / "served_adapter",
                    self.config.rollout.server_lora_name,
                    mode=self.config.server_sync_mode(),
                    api=self.config.rollout.server_api,
                )
            self._sync.push(model)
            if scheduler is not None:
                self._route_synced(scheduler)

    def _run(self, rows: list[Problem], samples_per_problem: int, seed: int, progress: Any) -> list[Trajectory]:
        """The agent loop over ``rows`` on the engine as it is, with the step's engine, sandbox and scheduler
        counters (``last_*_stats``)."""
        scheduler = self._engine if hasattr(self._engine, "step_stats") else None
        if scheduler is not None:
            scheduler.step_stats()  # start this step's counters now
        stats = getattr(self._engine, "stats", None)
        before = stats.snapshot() if stats is not None else None
        sandbox_before = self._sandbox_counts()
        trajectories = self.runtime.rollouts(
            rows,
            samples_per_problem,
            self._engine,
            self.tokenizer,
            self._agent_config(),
            seed=seed,
            check_sandbox=not self._checked,
            on_trajectory=None if progress is None else (lambda request, traj: progress.advance(traj)),
        )
        self._checked = True
        sandbox_after = self._sandbox_counts()
        if sandbox_after is not None:  # the client is built during the first rollout: it counted from 0
            sandbox_before = sandbox_before or dict.fromkeys(sandbox_after, 0)
            self.last_sandbox_stats = {
                f"sandbox/{k}": float(sandbox_after[k] - sandbox_before[k]) for k in sandbox_after
            }
        if before is not None:
            after = stats.snapshot()
            self.last_engine_stats = {k: float(after[k] - before[k]) for k in after}
        if self._sync is not None:
            self.last_engine_stats = {"sync_s": self._sync.last_sync_s}
        if scheduler is not None:
            self.last_scheduler_stats = scheduler.step_stats()
            if self._sync is not None:
                self.last_scheduler_stats["sched/synced"] = float(len(self._sync.last_loaded))
                self.last_scheduler_stats["sched/sync_failed"] = float(len(self._sync.last_failed))
        return trajectories

    def _progress(self, trainer: Any, total: int) -> Any:
        """The step's :class:`tirl.train.progress.RolloutProgress` as a context (its heartbeat runs inside), or a
        context yielding None without a label or off the main process (each rank would print its own)."""
        state = getattr(trainer, "state", None)
        if self.progress_label is None or not getattr(state, "is_world_process_zero", True):
            return contextlib.nullcontext(None)
        from tirl.train.progress import RolloutProgress

        step = int(getattr(state, "global_step", 0) or 0) + 1
        steps = getattr(state, "max_steps", None) or self.config.max_steps
        return RolloutProgress(f"{self.progress_label} step {step}/{steps} rollout", total)

    def _route_synced(self, scheduler: Any) -> None:
        """Servers that did not take this step's policy leave the rotation; ones that did (again) rejoin it:
        a trajectory must never be sampled from another step's weights."""
        for url in self._sync.last_failed:
            if scheduler.is_alive(url):
                scheduler.mark_down(url, "did not take the step's policy")
        for url in self._sync.last_loaded:
            if not scheduler.is_alive(url):
                logger.warning("rollout server %s took the policy again; back in rotation", url)
                scheduler.mark_up(url)

    def _sandbox_counts(self) -> dict[str, int] | None:
        """Failover counters of a sandbox service client (``SandboxClient.stats``); None for the local pool."""
        executor = self.runtime._executor if hasattr(self.runtime, "_executor") else None
        stats = getattr(executor, "stats", None)
        if not callable(stats) or not hasattr(executor, "check_health"):
            return None
        snap = stats()
        return {
            "failovers": snap.failovers,
            "resent": snap.resent_same_server,
            "internal_retries": snap.internal_retries,
        }

    def close(self) -> None:
        """Close the engine's batcher, the executor and the background loop. Idempotent."""
        self.runtime.close(self._engine)
        self._engine = None

    def close_sandbox(self) -> None:
        """Close the executor and the background loop but not the engine (after an interrupt: the engine may
        be inside a generation call that cannot be cut short, and the process is about to end)."""
        self.runtime.close()
        self._engine = None


class _policy_for_generation:
    """Context manager yielding the trainer's model ready for generation (DDP/DeepSpeed unwrapped; under FSDP a
    full, unsharded copy: :func:`fsdp_generation_copy`)."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self._cm: Any = None

    def __enter__(self) -> Any:
        model_wrapped = getattr(self.trainer, "model_wrapped", None)
        accelerator = getattr(self.trainer, "accelerator", None)
        if model_wrapped is None or accelerator is None:
            return self.trainer.model
        if getattr(accelerator, "is_fsdp2", False) or str(getattr(accelerator, "distributed_type", "")) in (
            "FSDP",
            "DistributedType.FSDP",
        ):
            return fsdp_generation_copy(self.trainer)
        from trl.models import unwrap_model_for_generation

        args = getattr(self.trainer, "args", None)
        self._cm = unwrap_model_for_generation(
            model_wrapped,
            accelerator,
            gather_deepspeed3_params=getattr(args, "ds3_gather_for_generation", True),
            gradient_checkpointing_kwargs=getattr(args, "gradient_checkpointing_kwargs", None),
        )
        return self._cm.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self._cm is not None:
            self._cm.__exit__(*exc)


def shard_numels(model: Any) -> tuple[int, list[int]]:
    """The model's parameter count and, per rank, how many of them the rank holds: under FSDP2 a ``DTensor``'s
    local part, under DeepSpeed ZeRO-3 a parameter's partition (``ds_tensor``; ``ds_numel`` is its full size), else
    the whole parameter. A collective (``all_gather_object``) when torch.distributed is initialised: every rank
    must call it."""
    import torch.distributed as dist

    total = local = 0
    for param in model.parameters():
        if hasattr(param, "ds_numel"):
            total += int(param.ds_numel)
            local += param.ds_tensor.numel() if getattr(param, "ds_tensor", None) is not None else 0
        else:
            total += param.numel()
            local += param.to_local().numel() if hasattr(param, "to_local") else param.numel()
    if not (dist.is_available() and dist.is_initialized()):
        return total, [local]
    per_rank: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(per_rank, local)
    return total, [int(n) for n in per_rank]


def fsdp_generation_copy(trainer: Any) -> Any:
    """A plain (unsharded) copy of an FSDP-sharded policy with its current weights, for the agent loop.

    Why: under FSDP every forward pass all-gathers the shards, a collective that all ranks must enter together,
    while each rank's agent loop runs a different number of forward passes (its own trajectories, turns and
    lengths): generating on the sharded model would hang. So before each rollout all ranks gather the full weights
    together once (``torch.distributed.checkpoint.state_dict.get_model_state_dict`` with ``full_state_dict``, the
    one collective) and each loads them into its own unsharded copy (built once per run from the model's config,
    kept on ``trainer._tirl_generation_copy``), which generates without collectives. Costs one full copy of the
    weights per rank. Full-weight policies only (a LoRA policy under FSDP is refused).

    The first call logs how the parameters are sharded (:func:`shard_numels`, also kept on
    ``trainer._tirl_shard_numels``). Ran in 2 CPU processes (FSDP2 on gloo, configs/accelerate/fsdp2-2cpu.yaml;
    docs/scale.md), never on GPUs.

    Raises:
        NotImplementedError: a peft (LoRA) policy under FSDP.
        RuntimeError: the gathered weights do not fit the copy (missing or unexpected keys).
    """
    import torch
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    unwrapped = trainer.accelerator.unwrap_model(trainer.model_wrapped)
    if hasattr(unwrapped, "peft_config"):
        raise NotImplementedError("a LoRA policy under FSDP is not supported; use DDP or DeepSpeed for LoRA runs")
    full = get_model_state_dict(trainer.model_wrapped, options=StateDictOptions(full_state_dict=True))
    copy_model = getattr(trainer, "_tirl_generation_copy", None)
    if copy_model is None:
        from transformers import AutoModelForCausalLM

        total, per_rank = shard_numels(trainer.model_wrapped)
        trainer._tirl_shard_numels = per_rank
        logging.getLogger("tirl.train.rl").info(
            "FSDP: the %s parameters are sharded over %d ranks (%s on each); each rank generates on a gathered "
            "full copy",
            f"{total:,}",
            len(per_rank),
            " / ".join(f"{n:,}" for n in per_rank),
        )

        dtype = next(iter(full.values())).dtype
        copy_model = AutoModelForCausalLM.from_config(unwrapped.config, dtype=dtype)
        copy_model.generation_config = unwrapped.generation_config
        copy_model.eval().requires_grad_(False)
        trainer._tirl_generation_copy = copy_model
    with torch.no_grad():
        result = copy_model.load_state_dict(full, strict=False)
    tied = {"lm_head.weight"} if getattr(unwrapped.config, "tie_word_embeddings", False) else set()
    missing = set(result.missing_keys) - tied
    if missing or result.unexpected_keys:
        raise RuntimeError(
            f"FSDP weights do not fit the generation copy: missing {sorted(missing)[:3]}, "
            f"unexpected {sorted(result.unexpected_keys)[:3]}"
        )
    if tied:
        copy_model.tie_weights()
    return copy_model


__all__ = [
    "ADVANTAGE_KEY",
    "AgentLoopSource",
    "METRICS_KEY",
    "REWARD_KEY",
    "RocRolloutFunc",
    "RolloutStats",
    "TrajectorySource",
    "default_executor_factory",
    "passthrough_reward",
]
