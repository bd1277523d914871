"""Bounded-staleness asynchronous rollouts (issue 42): the setting, the admission control, the correction."""

from __future__ import annotations

import pytest

from tirl.train.config import RLConfig, load_config

SERVER = ["rollout.server_url=http://127.0.0.1:9", "rollout.temperature=1.0", "problems_per_step=2"]


def _config(*overrides: str) -> RLConfig:
    return load_config(
        None, ["rollout.group_size=2", "optim.per_device_train_batch_size=2", "roc.min_per_class=1", *overrides]
    )


def test_default_is_synchronous():
    assert RLConfig().rollout.max_staleness == 0
    _config("problems_per_step=2").validate()  # the in-process engine with k = 0: as before


@pytest.mark.parametrize(
    ("overrides", "fix"),
    [
        (["rollout.temperature=0.7"], "rollout.temperature=1"),
        (["rollout.top_p=0.95"], "rollout.top_p=1"),
        (["rollout.server_url=null"], "rollout.server_url"),
        (["rollout.server_url=null", "rollout.use_vllm=true", "rollout.vllm_mode=server"], "vllm_mode=colocate"),
        (["rollout.max_staleness=-1"], ">= 0"),
        (["rollout.staleness_is_cap=1.0"], "> 1"),
        (["rollout.staleness_correction=sequence"], "token_truncate or sequence_mask"),
    ],
)
def test_k_over_0_refuses_what_breaks_the_correction_in_one_line_naming_the_fix(overrides, fix):
    config = _config(*SERVER, "rollout.max_staleness=1", *overrides)
    with pytest.raises(ValueError) as info:
        config.validate()
    message = str(info.value)
    assert "\n" not in message and fix in message, message


@pytest.mark.parametrize("extra", [[], ["rollout.staleness_correction=sequence_mask", "rollout.staleness_is_cap=5"]])
def test_k_over_0_on_a_server_at_temperature_1_is_accepted(extra):
    _config(*SERVER, "rollout.max_staleness=2", *extra).validate()
    _config(*SERVER, "rollout.server_url=null", "rollout.use_vllm=true", "rollout.max_staleness=1", *extra).validate()
    _config(
        "rollout.launch_server=true", "rollout.temperature=1.0", "problems_per_step=2", "rollout.max_staleness=1"
    ).validate()


# --------------------------------------------------------------------------------------------------------------
# admission control (tirl.rollout.staleness.StalenessProducer)

import threading  # noqa: E402
import time  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tirl.rollout.staleness import StalenessProducer, planned_problems  # noqa: E402


class FakeServer:
    """A generator holding one weight version, which checks that no push lands while a batch is generating and
    that a batch finishes on the version it started with."""

    def __init__(self, latencies: list[float], gates: dict[int, threading.Event] | None = None) -> None:
        self.latencies = latencies
        self.gates = gates or {}
        self.version: int | None = None
        self.trainer_version = 0
        self.running = 0
        self.lock = threading.Lock()
        self.generated: list[tuple[int, int]] = []  # (step, version it ran on)
        self.errors: list[str] = []

    def push(self) -> None:
        with self.lock:
            if self.running:
                self.errors.append(f"push of {self.trainer_version} with {self.running} batches generating")
            self.version = self.trainer_version

    def generate(self, step: int) -> tuple[int, int]:
        with self.lock:
            self.running += 1
            start = self.version
        time.sleep(self.latencies[step % len(self.latencies)])
        if step in self.gates:
            assert self.gates[step].wait(30), f"step {step} was never released"
        with self.lock:
            self.running -= 1
            if self.version != start:
                self.errors.append(f"step {step} started on {start}, finished on {self.version}")
            self.generated.append((step, start))
        return step, start


def _train(server: FakeServer, k: int, steps: int, update_s: float = 0.0, start: int = 0, after_step=None):
    producer = StalenessProducer(server.generate, server.push, k, steps)
    taken = []
    try:
        for step in range(start, steps):
            server.trainer_version = step
            t = producer.take(step, step)
            taken.append(t)
            time.sleep(update_s)  # the update, while admitted batches generate
            if after_step is not None:
                after_step(step)
    finally:
        producer.close()
    return producer, taken


@settings(max_examples=25, deadline=None)
@given(
    k=st.integers(1, 3),
    steps=st.integers(1, 9),
    latencies=st.lists(st.sampled_from([0.0, 0.001, 0.003]), min_size=1, max_size=5),
    update_s=st.sampled_from([0.0, 0.002]),
    start=st.integers(0, 2),
)
def test_the_bound_is_never_exceeded_nothing_is_dropped_and_no_push_lands_on_a_running_batch(
    k, steps, latencies, update_s, start
):
    server = FakeServer(latencies)
    producer, taken = _train(server, k, steps, update_s, start=min(start, steps - 1))
    first = min(start, steps - 1)
    assert not server.errors, server.errors
    assert [t.step for t in taken] == list(range(first, steps))  # oldest first, each step once
    for t in taken:
        assert 0 <= t.staleness <= k, (t.step, t.version)
        assert t.result == (t.step, t.version)  # trained on what was generated, by the version it was admitted at
    for step, version in producer.admitted:  # never started when it would exceed the bound
        assert 0 <= step - version <= k and step < steps
    assert sorted(s for s, _ in producer.admitted) == list(range(first, steps))  # nothing generated twice or lost
    assert sorted(server.generated) == sorted(producer.admitted)


def test_k_1_overlaps_every_step_after_the_first_and_pushes_every_step():
    server = FakeServer([0.001])
    producer, taken = _train(server, 1, 5, update_s=0.003)
    assert [t.staleness for t in taken] == [0, 1, 1, 1, 1]
    assert producer.admitted == [(0, 0), (1, 0), (2, 1), (3, 2), (4, 3)]


def test_k_2_defers_the_push_while_an_older_batch_generates():
    release = threading.Event()  # step 2 is slow: at step 1 it is still generating on version 0
    server = FakeServer([0.0], gates={2: release})
    producer, taken = _train(server, 2, 4, after_step=lambda step: step == 1 and release.set())
    assert not server.errors
    assert [t.staleness for t in taken] == [0, 1, 2, 1]
    assert producer.admitted[:3] == [(0, 0), (1, 0), (2, 0)]


def test_a_failed_generation_is_raised_on_the_trainer_thread():
    def generate(step: int) -> int:
        raise OSError(f"server down at {step}")

    producer = StalenessProducer(generate, lambda: None, 1, 3)
    with pytest.raises(OSError, match="server down at 0"):
        producer.take(0, 0)
    producer.close()


def test_planned_problems_cover_each_epoch_once_per_rank_and_are_a_function_of_the_step():
    problems = list(range(10))
    epoch = [
        p for step in range(5) for rank in range(2) for p in planned_problems(problems, step, 1, rank=rank, world=2)
    ]
    assert sorted(epoch) == problems
    assert planned_problems(problems, 7, 3, seed=1) == planned_problems(problems, 7, 3, seed=1)
    assert planned_problems(problems, 7, 3, seed=1) != planned_problems(problems, 7, 3, seed=2)


# --------------------------------------------------------------------------------------------------------------
# the rollout function with k > 0: slow multi-turn rollouts are trained as often as fast ones (no skew)

from types import SimpleNamespace  # noqa: E402
from typing import Any  # noqa: E402

from tirl.data.problem import Problem  # noqa: E402
from tirl.protocol import ToolCall, ToolCallRecord, Trajectory, TurnRecord  # noqa: E402
from tirl.reward.scorer import Score  # noqa: E402
from tirl.sandbox import ExecutionResult  # noqa: E402
from tirl.train.rollout_func import METRICS_KEY, RocRolloutFunc  # noqa: E402

HARD = [Problem(id=f"d{d}", problem=f"problem of difficulty {d}", answer="1") for d in range(1, 13)]
"""Twelve problems; difficulty d takes d tool-calling turns and 8 d tokens."""


class SlowMultiTurnServer:
    """A fake served source: a trajectory of difficulty d has d tool-call turns and 8 d tokens, and takes time
    growing with its length (0.1 ms per token), so the hard problems are the slow ones, as in multi-turn RL."""

    def __init__(self) -> None:
        self.version: int | None = None
        self.sampled: list[tuple[str, int]] = []  # (problem id, response length) of every generated trajectory
        self.pushes: list[int] = []

    def push_policy(self, trainer: Any) -> None:
        self.version = trainer.state.global_step
        self.pushes.append(self.version)

    def generate(self, problems: Any, n: int, *, seed: int, trainer: Any) -> list[Trajectory]:
        raise AssertionError("max_staleness > 0 never generates on the trainer's thread")

    def generate_served(self, problems: Any, n: int, *, seed: int) -> list[Trajectory]:
        out = []
        for p in problems:
            d = int(p.id[1:])
            for j in range(n):
                length = 8 * d
                time.sleep(0.0001 * length)
                turns = [
                    TurnRecord(
                        text="",
                        tool_calls=[
                            ToolCallRecord(
                                call=ToolCall(name="f", arguments={"code": "x"}),
                                result=ExecutionResult(status="ok", duration_s=0.0),
                                cls="ok",
                            )  # type: ignore[arg-type]
                        ],
                    )
                    for _ in range(d)
                ] + [TurnRecord(text="", answer_blocks=1)]
                out.append(
                    Trajectory(
                        prompt_ids=[1, d],
                        response_ids=list(range(100, 100 + length)),
                        loss_mask=[1] * length,
                        logprobs=[-0.5] * length,
                        turns=turns,
                        final_answer="1" if j % 2 else "0",
                        finish_reason="answer",
                    )
                )
                self.sampled.append((p.id, length))
        return out


class ParityScorer:
    def score(self, trajectories: Any, problems: Any) -> list[Score]:
        return [Score(1.0 if t.final_answer == "1" else 0.0) for t in trajectories]


def test_slow_multi_turn_rollouts_leave_no_length_or_difficulty_skew(tmp_path):
    k, steps, per_step = 2, 8, 3  # two epochs of the 12 problems
    config = load_config(
        None,
        [
            f"output_dir={tmp_path}",
            "rollout.group_size=2",
            "rollout.oversample=2",
            "roc.min_per_class=1",
            f"problems_per_step={per_step}",
            "optim.per_device_train_batch_size=2",
            f"rollout.max_staleness={k}",
            "logging.log_trajectories=true",
        ],
    )
    server = SlowMultiTurnServer()
    rollout = RocRolloutFunc(config, HARD, server, ParityScorer(), pad_token_id=0)
    prompts = [HARD[0].problem] * (2 * per_step)  # TRL's prompts: only their count is used with k > 0
    trained: list[tuple[str, int]] = []
    lags = []
    try:
        for step in range(steps):
            trainer = SimpleNamespace(
                state=SimpleNamespace(global_step=step, max_steps=steps),
                accelerator=SimpleNamespace(process_index=0, num_processes=1),
            )
            out = rollout(prompts, trainer)
            metrics = out[METRICS_KEY]
            lag = [j for j in range(k + 1) if metrics[f"stale/lag_{j}"] == 1.0]
            assert len(lag) == 1 and lag[0] <= k and metrics["time/overlap_saved_s"] >= 0.0
            lags.append(lag[0])
            batch = rollout.last.trajectories
            trained += [(f"d{t.prompt_ids[1]}", len(t.response_ids)) for t in batch]
            # the step's trained-vs-sampled distribution: sampled is the whole batch this step trains (generated
            # up to k versions ago); a group's samples share one length here, so RoC's kept subset matches it
            assert metrics["length/mean"] == sum(len(t.response_ids) for t in batch) / len(batch)
            assert metrics["turns/mean"] == sum(len(t.turns) for t in batch) / len(batch)
            for sampled, kept in [
                ("length/mean", "length/kept_mean"),
                ("length/p90", "length/kept_p90"),
                ("turns/mean", "turns/kept_mean"),
                ("tool_calls/per_traj", "tool_calls/kept_per_traj"),
            ]:
                assert metrics[kept] == pytest.approx(metrics[sampled]) and metrics[kept] > 0, (step, kept)
            time.sleep(0.01)  # the update, while the next steps' batches generate
    finally:
        rollout.close()
    # every sampled trajectory reached an update (its group, then RoC), the slow ones included: the same multiset
    # of problems and lengths
    assert sorted(trained) == sorted(server.sampled)
    ids = [pid for pid, _ in trained]
    assert {ids.count(p.id) for p in HARD} == {2 * 2 * 2}  # each problem: 2 epochs x 4 sampled, slow or fast
    assert sum(length for _, length in trained) / len(trained) == sum(length for _, length in server.sampled) / len(
        server.sampled
    )
    assert lags[0] == 0 and max(lags) <= k and any(lags)
    # the trajectory log names the planned problems the step trained, not TRL's prompts
    from tirl.runs.trajectories import step_groups

    logged = {g[0]["problem_id"] for g in step_groups(tmp_path, 2).values()}
    assert logged and logged <= {p.id for p in HARD} and logged != {HARD[0].id}


# --------------------------------------------------------------------------------------------------------------
# the correction (tirl.algo.staleness.staleness_weights)


def test_token_truncate_caps_each_ratio_and_measures_kl_ess_and_the_clipped_share():
    import torch

    from tirl.algo.staleness import staleness_weights

    mu = torch.log(torch.tensor([[0.5, 0.5, 0.1, 0.2], [0.4, 0.4, 0.4, 0.4]]))
    pi = torch.log(torch.tensor([[0.5, 0.75, 0.5, 0.9], [0.4, 0.4, 0.4, 0.4]]))
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])  # the last token of row 0 is a tool token
    weights, m = staleness_weights(pi, mu, mask, mode="token_truncate", cap=2.0)
    assert torch.allclose(weights, torch.tensor([[1.0, 1.5, 2.0, 0.0], [1.0, 1.0, 0.0, 0.0]]))
    ratios = torch.tensor([1.0, 1.5, 5.0, 1.0, 1.0])
    assert m["stale/is_clipped"] == pytest.approx(1 / 5)  # the ratio 5 token, of five model tokens
    assert m["stale/ratio_max"] == pytest.approx(5.0)
    assert m["stale/ess"] == pytest.approx(float(ratios.sum() ** 2 / (5 * (ratios**2).sum())))
    assert m["stale/mismatch_kl"] == pytest.approx(float((ratios - 1 - ratios.log()).mean()), rel=1e-5)
    same, m0 = staleness_weights(mu, mu, mask, mode="token_truncate", cap=2.0)
    assert torch.equal(same, mask.float()) and m0["stale/mismatch_kl"] == 0.0 and m0["stale/ess"] == 1.0


def test_sequence_mask_drops_whole_rows_outside_the_cap_and_nan_log_probs_count_as_on_policy():
    import torch

    from tirl.algo.staleness import staleness_weights

    mu = torch.log(torch.tensor([[0.5, 0.1, 0.5], [0.5, 0.5, 0.5]]))
    mu[1, 2] = float("nan")  # a server that gave no log-prob for one token
    pi = torch.log(torch.tensor([[0.5, 0.5, 0.5], [0.6, 0.5, 0.9]]))
    mask = torch.ones(2, 3)
    weights, m = staleness_weights(pi, mu, mask, mode="sequence_mask", cap=2.0)
    # row 0: product 5 > 2, masked; row 1: product 1.2 (the NaN token counts as ratio 1), kept with weight 1
    assert torch.equal(weights, torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]))
    assert m["stale/is_clipped"] == pytest.approx(3 / 5)
    with pytest.raises(ValueError, match="token_truncate or sequence_mask"):
        staleness_weights(pi, mu, mask, mode="token", cap=2.0)


def test_a_run_that_ends_up_generating_in_process_is_refused_at_k_over_0(tmp_path):
    """``launch_server: auto`` falls back to the in-process engine when vLLM is missing: the rollout function
    refuses k > 0 then, in one line naming the fix, rather than overlapping generation with the update of the same
    weight tensors."""
    config = load_config(
        None,
        [f"output_dir={tmp_path}", "rollout.group_size=2", "roc.min_per_class=1", "rollout.max_staleness=1"],
    )
    in_process = SimpleNamespace(generate=None, generate_served=None, serves_own_weights=False)
    with pytest.raises(ValueError) as info:
        RocRolloutFunc(config, HARD, in_process, ParityScorer(), pad_token_id=0)
    assert "\n" not in str(info.value) and "rollout.server_url" in str(info.value)
    RocRolloutFunc(config, HARD, SlowMultiTurnServer(), ParityScorer(), pad_token_id=0)  # a served source is taken
