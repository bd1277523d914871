"""``tirl analyze entropy``: per-token entropy on the exact saved ids, the statistics, the CLI, the files."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from tirl.analysis.entropy import (
    entropy_report,
    label_stats,
    post_tool_positions,
    score_run,
    token_entropies,
)
from tirl.cli.main import app
from tirl.view import render_html, view_records
from tirl.view.load import iter_token_records, read_run
from view_fixtures import write_eval_run, write_train_run


@pytest.fixture(scope="module")
def tiny(tiny_smollm2_model_dir):
    from tirl.models import load

    return load(tiny_smollm2_model_dir, dtype="float32")


class DecodeOnly:
    """A tokenizer that can only decode single ids: any attempt to re-tokenise text fails the test."""

    def __init__(self, inner):
        self.inner = inner
        self.decoded = []

    def decode(self, ids, skip_special_tokens=False):
        assert len(ids) == 1
        self.decoded.append(ids[0])
        return self.inner.decode(ids, skip_special_tokens=skip_special_tokens)

    def __getattr__(self, name):
        raise AssertionError(f"tokenizer.{name} used: entropy must not re-tokenise")


def test_chunked_entropy_equals_the_full_softmax(tiny):
    import torch

    model, _ = tiny
    prompt, response = [1, 5, 9, 200, 31], [44, 45, 46, 7, 8, 900, 12]
    got = token_entropies(model, prompt, response, chunk=3)
    with torch.no_grad():
        logits = model(torch.tensor([prompt + response])).logits[0].double()
    logp = torch.log_softmax(logits, -1)
    want = (-(logp.exp() * logp).sum(-1))[len(prompt) - 1 : -1].tolist()
    assert len(got) == len(response)
    assert got == pytest.approx(want, rel=1e-4)
    assert all(0 <= e <= math.log(logits.shape[-1]) + 1e-4 for e in got)


def test_empty_prompt_is_refused_and_empty_response_is_empty(tiny):
    model, _ = tiny
    with pytest.raises(ValueError):
        token_entropies(model, [], [1, 2])
    assert token_entropies(model, [1], []) == []


def test_score_run_rescoring_uses_saved_ids_and_leaves_injected_tokens_empty(tiny, tmp_path):
    model, tok = tiny
    folder = write_eval_run(tmp_path / "run", 3)
    wrapped = DecodeOnly(tok)
    path = score_run(folder, model, wrapped, "tiny")
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    recs = dict(iter_token_records(read_run(folder)))
    assert [r["id"] for r in rows] == list(recs)
    for row in rows:
        rec = recs[row["id"]]
        want = token_entropies(model, rec["prompt_ids"], rec["response_ids"])
        assert len(row["entropy"]) == len(rec["response_ids"]) == len(row["tokens"])
        for e, w, m in zip(row["entropy"], want, rec["loss_mask"]):
            assert (e is None) == (m == 0)
            if m:
                assert e == pytest.approx(w, abs=1e-4)
    assert sorted(set(wrapped.decoded)) == sorted({t for r in recs.values() for t in r["response_ids"]})


def test_rescoring_again_skips_what_is_done(tiny, tmp_path):
    model, tok = tiny
    folder = write_eval_run(tmp_path / "run", 4)
    score_run(folder, model, tok, "tiny", limit=2)
    path = score_run(folder, model, tok, "tiny")
    ids = [json.loads(x)["id"] for x in path.read_text().splitlines()]
    assert len(ids) == 4 == len(set(ids))


def test_records_without_token_ids_are_refused(tiny, tmp_path):
    folder = write_eval_run(tmp_path / "run", 2)
    lines = [json.loads(x) for x in (folder / "trajectories.jsonl").read_text().splitlines()]
    for rec in lines:
        del rec["response_ids"]
    (folder / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    with pytest.raises(ValueError, match="older files"):
        score_run(folder, tiny[0], tiny[1], "tiny")


@pytest.mark.parametrize(
    "mask,k,want",
    [
        ([1, 1, 0, 0, 1, 1, 1], 2, {4, 5}),
        ([0, 0, 1, 1], 3, set()),  # an injected run before any model token is not a tool response
        ([1, 0, 1, 0, 1, 1], 5, {2, 4, 5}),  # the next injected run cuts the window
        ([1, 1, 1], 2, set()),
    ],
)
def test_post_tool_positions(mask, k, want):
    assert post_tool_positions(mask, k) == want


def test_label_stats_split_post_tool_and_count_high_entropy_tokens():
    rows = [
        {"id": "a", "entropy": [0.1, 0.2, None, 3.0, 2.5, 0.1], "tokens": ["x", "y", "<inj>", " But", "Wait", "x"]},
        {"id": "b", "entropy": [2.9, None, 0.3], "tokens": [" But", "<inj>", "z"]},
    ]
    masks = {"a": [1, 1, 0, 1, 1, 1], "b": [1, 0, 1]}
    st = label_stats("m", rows, masks, first_k=1)
    values = [0.1, 0.2, 3.0, 2.5, 0.1, 2.9, 0.3]
    assert st.tokens == len(values) and st.mean == pytest.approx(sum(values) / len(values))
    post = [3.0, 0.3]  # first model token after each injected run
    assert st.post_tool["mean_post"] == pytest.approx(sum(post) / 2)
    assert st.post_tool["mean_other"] == pytest.approx((sum(values) - sum(post)) / (len(values) - 2))
    high = {f["token"]: f["count"] for f in st.forking}
    assert high.get("But") == 2 and "x" not in high  # " But" twice above p80; "x" never
    assert sum(st.histogram["counts"]) == len(values)


def test_report_compares_labels_on_the_same_trajectories(tiny, tmp_path):
    model, tok = tiny
    folder = write_eval_run(tmp_path / "run", 4)
    score_run(folder, model, tok, "a")
    score_run(folder, model, tok, "b", limit=2)
    rep = entropy_report(folder)
    assert rep["trajectories"] == 2 and [s["label"] for s in rep["labels"]] == ["a", "b"]
    a, b = rep["labels"]
    assert a["tokens"] == b["tokens"] and a["mean"] == pytest.approx(b["mean"])  # same model, same tokens
    with pytest.raises(FileNotFoundError):
        entropy_report(folder, ["nope"])


def test_cli_writes_files_report_and_plot_and_the_viewer_uses_them(tiny_smollm2_model_dir, tmp_path):
    folder = write_train_run(tmp_path / "train", steps=1)
    res = CliRunner().invoke(
        app,
        [
            "analyze",
            "entropy",
            str(folder),
            "--model",
            str(tiny_smollm2_model_dir),
            "--label",
            "tiny",
            "--first-k",
            "3",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "after a tool response" in res.output and "top high-entropy tokens under tiny" in res.output
    rep = json.loads((folder / "entropy" / "report.json").read_text())
    assert rep["trajectories"] == 8 and rep["labels"][0]["post_tool"]["n_post"] == 8 * 3
    pt = rep["labels"][0]["post_tool"]
    printed = [line for line in res.output.splitlines() if "first 3 after a tool response" in line]
    assert printed and f"{pt['mean_post']:.3f}" in printed[0]  # the table a person reads matches the JSON
    import matplotlib.image as mpimg

    img = mpimg.imread(folder / "entropy" / "entropy.png")
    assert img.shape[0] > 200 and img.shape[1] > 600
    html = render_html(folder)
    assert "token entropy: tiny" in html


def test_cli_rejects_mismatched_labels(tmp_path):
    res = CliRunner().invoke(app, ["analyze", "entropy", str(tmp_path), "--model", "a", "--model", "b", "--label", "x"])
    assert res.exit_code == 2 and "--label" in res.output


def test_comparison_shows_a_sharper_checkpoint_as_lower_entropy(tiny_smollm2_model_dir, tmp_path):
    """Scaling the LM head by 3 (inverse temperature 3) lowers every token's entropy; the report must show it."""
    import torch

    from tirl.models import load

    model, tok = load(tiny_smollm2_model_dir, dtype="float32")
    folder = write_eval_run(tmp_path / "run", 3)
    score_run(folder, model, tok, "before")
    head = model.get_output_embeddings()
    sharp = torch.nn.Linear(head.in_features, head.out_features, bias=False)
    sharp.weight.data = head.weight.detach().clone() * 3.0
    model.set_output_embeddings(sharp)
    score_run(folder, model, tok, "after")
    before, after = entropy_report(folder, ["before", "after"])["labels"]
    assert before["tokens"] == after["tokens"]
    assert after["mean"] < before["mean"] and after["quantiles"]["p50"] < before["quantiles"]["p50"]


def test_damaged_token_fields_are_skipped_not_fed_to_the_model(tiny, tmp_path):
    model, tok = tiny
    folder = write_eval_run(tmp_path / "run", 4)
    lines = [json.loads(x) for x in (folder / "trajectories.jsonl").read_text().splitlines()]
    lines[0]["response_ids"][0] = "x"
    lines[1]["loss_mask"] = lines[1]["loss_mask"][:-1]
    lines[2]["loss_mask"][0] = 2
    (folder / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    path = score_run(folder, model, tok, "tiny")
    assert [json.loads(x)["id"] for x in path.read_text().splitlines()] == ["bench/p1#1"]


def test_reference_run_renders_sft_conversations_with_their_mask(smollm2_tokenizer, tmp_path):
    from tirl.analysis.reference import write_reference_run
    from tirl.data.sft import load_sft_examples, render_sft_example

    path = write_reference_run(tmp_path / "ref", "gsm8k_tir:0-3", smollm2_tokenizer)
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    examples = load_sft_examples(["gsm8k_tir:0-3"], shuffle=False)
    assert [r["problem_id"] for r in rows] == [e.id for e in examples]
    for row, ex in zip(rows, examples):
        rendered = render_sft_example(smollm2_tokenizer, ex)
        assert row["response_ids"] == rendered.response_ids and row["loss_mask"] == rendered.loss_mask
        assert row["reference"] is True and row["verdict"]["status"] == "reference"
        assert sum(t["num_tokens"] for t in row["turns"]) == sum(row["loss_mask"]) == row["model_tokens"]
        calls = [c for t in row["turns"] for c in t["tool_calls"]]
        assert calls and all(c["call"]["arguments"]["code"] for c in calls)
        # every tool response is in an injected (mask 0) segment: post-tool positions exist
        assert post_tool_positions(row["loss_mask"], 5)
    recs = view_records(read_run(tmp_path / "ref"))
    assert all(r["classes"] and r["verdict"] == "correct" for r in recs)


def test_reference_run_cli_rejects_an_unknown_source(tmp_path):
    res = CliRunner().invoke(
        app, ["analyze", "reference-run", str(tmp_path / "r"), "--model", "smollm2-135m-instruct", "--source", "nope:3"]
    )
    assert res.exit_code == 2 and "nope" in res.output
