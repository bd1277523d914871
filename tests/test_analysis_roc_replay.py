"""``tirl analyze roc``: the offline replay of selection rules on fixture runs (an eval run and an RL run)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from tirl.algo.roc import RocConfig
from tirl.analysis.roc_replay import kept_metrics, load_run, replay
from tirl.cli.main import app
from tirl.data.problem import Problem
from tirl.eval.runner import trajectory_record
from tirl.protocol import ToolCall, ToolCallRecord, Trajectory, TurnRecord
from tirl.reward.scorer import Score
from tirl.sandbox import ExecutionResult
from tirl.train.config import load_config
from tirl.train.rollout_func import RocRolloutFunc


class _Tok:
    def decode(self, ids, skip_special_tokens=False):
        return " ".join(map(str, ids))


def _traj(failing: int, ok: int, answer_blocks: int = 1, tokens: int = 10) -> Trajectory:
    records = [
        ToolCallRecord(
            call=ToolCall(name="f", arguments={"code": "x"}),
            result=ExecutionResult(status="error" if k < failing else "ok"),
            cls="error" if k < failing else "ok",
        )  # type: ignore[arg-type]
        for k in range(failing + ok)
    ]
    return Trajectory(
        prompt_ids=[1, 2],
        response_ids=list(range(tokens)),
        loss_mask=[1] * tokens,
        turns=[TurnRecord(text="t", tool_calls=records), TurnRecord(text="a", answer_blocks=answer_blocks)],
        final_answer="1",
    )


# per problem, 8 samples: (correct, failing calls, ok calls); 4 positives of which 2 recovered from a failing call
GROUP = [
    (True, 1, 1),
    (True, 0, 1),
    (True, 1, 1),
    (True, 0, 1),
    (False, 1, 0),
    (False, 0, 1),
    (False, 2, 0),
    (False, 0, 1),
]


def _eval_run(folder, problems: int = 6, group=GROUP):
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "trajectories.jsonl", "w") as fh:
        for p in range(problems):
            for j, (correct, bad, ok) in enumerate(group):
                rec = trajectory_record(
                    _traj(bad, ok, tokens=10 + j),
                    _Tok(),
                    {"correct": correct, "status": "ok"},
                    "text",
                    benchmark="fixture",
                    problem_id=f"p{p}",
                    sample_index=j,
                )
                fh.write(json.dumps(rec) + "\n")
    return folder


def test_eval_run_groups_and_penalties_come_from_the_records(tmp_path):
    data = load_run(_eval_run(tmp_path / "ev", problems=2))
    assert data.kind == "eval" and len(data.groups) == 2 and all(len(g) == 8 for g in data.groups)
    g = data.groups[0]
    assert [m.positive for m in g] == [c for c, _, _ in GROUP]
    assert g[0].p_err == 0.5 and g[1].p_err == 0.0 and g[6].p_err == 1.0 and g[0].p_format == 0.0
    assert g[3].tokens == 13


def test_problems_with_fewer_samples_than_the_others_are_left_out(tmp_path):
    run = _eval_run(tmp_path / "ev", problems=2)
    rows = (run / "trajectories.jsonl").read_text().splitlines()
    (run / "trajectories.jsonl").write_text("\n".join(rows[:-3]) + "\n{torn")  # an unfinished run
    data = load_run(run)
    assert len(data.groups) == 1 and data.incomplete_groups == 1
    assert replay(data, replays=2)["summary"]["incomplete_groups_left_out"] == 1


def test_roc_keeps_fewer_positives_with_failing_calls_than_random(tmp_path):
    data = load_run(_eval_run(tmp_path / "ev"), RocConfig(min_per_class=1))
    rep = replay(data, replays=100, config=RocConfig(min_per_class=1))
    assert rep["keep"] == 4 and rep["kind"] == "eval"
    cols = rep["columns"]
    assert cols["sampled"]["pos_with_failing_call"]["mean"] == pytest.approx(0.5)
    # quotas 2 positives / 2 negatives; the two clean positives have penalty 0 and are always taken
    assert cols["roc_release"]["pos_with_failing_call"]["mean"] == 0.0
    assert cols["roc_paper"]["pos_with_failing_call"]["mean"] == 0.0
    rnd = cols["random"]["pos_with_failing_call"]
    assert 0.35 < rnd["mean"] < 0.65 and rnd["max"] > rnd["min"]  # spread over replays
    assert cols["roc_release"]["failing_calls_in_pos"]["mean"] == 0.0
    assert cols["sampled"]["failing_calls_in_pos"]["mean"] == pytest.approx(2 / 6)
    # a random pick differs from another random pick in most groups; RoC's from a random one too
    assert cols["random"]["differs_from_random"]["mean"] > 0.5
    assert cols["roc_paper"]["differs_from_random"]["mean"] > 0.5
    assert rep["summary"]["groups_roc_can_choose"] == 6 and rep["summary"]["sampled_pos_with_failing_call"] == 12


def test_a_task_without_failing_positives_gives_roc_nothing_to_choose(tmp_path):
    clean = [(True, 0, 1)] * 4 + [(False, 1, 0)] * 4
    rep = replay(load_run(_eval_run(tmp_path / "ev", group=clean)), replays=20, config=RocConfig(min_per_class=1))
    assert rep["summary"]["groups_roc_can_choose"] == 0
    for col in ("random", "roc_paper", "roc_release"):
        assert rep["columns"][col]["pos_with_failing_call"]["mean"] == 0.0
    # all positives look alike to RoC and it never ranks negatives: its pick looks like a random one with the
    # same class counts, so it differs from a random pick only where the random one has other class counts
    assert rep["columns"]["roc_release"]["positive_share"]["mean"] == 0.5
    same_counts = replay(load_run(_eval_run(tmp_path / "ev2", group=[(True, 0, 1)] * 8)), replays=20)
    assert same_counts["columns"]["roc_paper"]["differs_from_random"]["mean"] == 0.0


def test_kept_metrics_count_calls_formats_and_lengths():
    from tirl.analysis.roc_replay import Member

    kept = [
        Member(1.0, 0.0, 0.0, 0.0, 2, 0, 10),
        Member(1.0, 1.5, 0.5, 1.0, 0, 0, 20),
        Member(0.0, 0.0, 1.0, 0.0, 1, 1, 30),
    ]
    m = kept_metrics(kept)
    assert m["calls_per_traj"] == 1.0 and m["length"] == 20.0 and m["pos_without_call"] == 0.5
    assert m["pos_format_violation"] == 0.5 and m["pos_with_failing_call"] == 0.0
    assert m["positive_share"] == pytest.approx(2 / 3)


def _rl_run(tmp_path):
    problems = [Problem(id=f"q{i}", problem=f"problem {i}", answer="1") for i in range(2)]
    cfg = load_config(
        None,
        [
            "rollout.group_size=4",
            "rollout.oversample=2",
            "roc.min_per_class=1",
            "problems_per_step=2",
            "optim.per_device_train_batch_size=4",
            "logging.log_trajectories=true",
            f"output_dir={tmp_path}",
        ],
    )

    class Source:
        def generate(self, probs, n, *, seed, trainer):
            return [_traj(bad, ok) for _ in probs for (_, bad, ok) in GROUP[:n]]

    class Scorer:
        def score(self, trajs, probs):
            return [Score(1.0 if GROUP[i % 8][0] else 0.0) for i in range(len(trajs))]

    fn = RocRolloutFunc(cfg, problems, Source(), Scorer(), 0)
    for step in range(3):
        fn(
            ["problem 0"] * 4 + ["problem 1"] * 4,
            SimpleNamespace(state=SimpleNamespace(global_step=step), accelerator=SimpleNamespace(process_index=0)),
        )
    return tmp_path


def test_rl_run_logs_are_replayed_with_the_runs_own_decision(tmp_path):
    data = load_run(_rl_run(tmp_path / "rl"))
    assert data.kind == "rl" and len(data.groups) == 6 and data.logged_keep == 4
    rep = replay(data, replays=10, config=RocConfig(min_per_class=1))
    assert rep["keep"] == 4 and "logged" in rep["columns"]
    # the run itself used roc_paper: its logged kept positives have no failing call, as the replay's
    assert rep["columns"]["logged"]["pos_with_failing_call"]["mean"] == 0.0


def test_cli_prints_the_table_and_writes_json(tmp_path):
    run = _eval_run(tmp_path / "ev")
    res = CliRunner().invoke(app, ["analyze", "roc", str(run), "--replays", "20"], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert "kept positives with >= 1 failing call" in res.output and "roc_release" in res.output
    report = json.loads((run / "roc_replay.json").read_text())
    assert report["replays"] == 20 and set(report["columns"]) == {"sampled", "random", "roc_paper", "roc_release"}


def test_cli_says_what_to_do_when_there_is_nothing_to_down_sample(tmp_path):
    run = _eval_run(tmp_path / "ev", group=GROUP[:4])
    res = CliRunner().invoke(app, ["analyze", "roc", str(run), "--keep", "4"])
    assert res.exit_code == 2 and "nothing to down-sample" in res.output
    missing = CliRunner().invoke(app, ["analyze", "roc", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "logging.log_trajectories" in missing.output


def test_the_replayed_rules_come_from_the_registry(tmp_path):
    """A rule registered with register_rule is a column of the replay without further code; a rule that keeps
    every trajectory (plain GRPO's ``all``) is not (it would repeat ``sampled``); an unknown name is refused."""
    from tirl.algo.roc import Selection
    from tirl.algo.selection import RULES, register_rule
    from tirl.analysis.roc_replay import replay_rules

    assert replay_rules() == ("random", "roc_paper", "roc_release")

    @register_rule("first_k_test", oversamples=True, description="the first K scored samples (test only)")
    def first_k(group, target_size, rng, config):
        kept = [i for i, c in enumerate(group) if c.reward is not None][:target_size]
        return Selection(indices=kept, status="selected")

    try:
        assert replay_rules() == ("random", "roc_paper", "roc_release", "first_k_test")
        rep = replay(load_run(_eval_run(tmp_path / "ev")), replays=3, config=RocConfig(min_per_class=1))
        assert list(rep["columns"]) == ["sampled", "random", "roc_paper", "roc_release", "first_k_test"]
        # the first 4 of the group are the 4 positives (2 of them with a failing call)
        assert rep["columns"]["first_k_test"]["pos_with_failing_call"]["mean"] == pytest.approx(0.5)
        only = replay(load_run(_eval_run(tmp_path / "ev")), replays=2, rules=["roc_paper"])
        assert list(only["columns"]) == ["sampled", "roc_paper"]
        with pytest.raises(ValueError, match="unknown selection rule"):
            replay(load_run(_eval_run(tmp_path / "ev")), replays=1, rules=["nope"])
    finally:
        del RULES["first_k_test"]
