"""Cutting a GRPO micro-batch to the rows and columns that carry gradient: the rule, and TRL's loss unchanged."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tirl.train.micro_batch import compact_micro_batch, row_policy


def _batch() -> dict[str, Any]:
    # 4 rows; prompts left-padded to 6, completions right-padded to 7
    prompt_mask = torch.tensor(
        [
            [0, 0, 1, 1, 1, 1],
            [0, 1, 1, 1, 1, 1],
            [1, 1, 1, 1, 1, 1],  # the longest prompt belongs to a row without gradient
            [0, 0, 0, 1, 1, 1],
        ]
    )
    completion_mask = torch.tensor(
        [[1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0, 0]]
    )  # a placeholder: one token
    tool_mask = torch.tensor(
        [
            [1, 1, 1, 1, 1, 1, 1],
            [1, 0, 0, 1, 1, 1, 1],  # an injected tool segment
            [1, 1, 1, 1, 1, 1, 1],
            [0, 0, 0, 0, 0, 0, 0],
        ]
    )
    return {
        "prompt_ids": torch.arange(24).view(4, 6),
        "prompt_mask": prompt_mask,
        "completion_ids": torch.arange(28).view(4, 7) + 100,
        "completion_mask": completion_mask,
        "tool_mask": tool_mask,
        "advantages": torch.tensor([0.7, -0.7, 0.0, 0.0]),
        "sampling_per_token_logps": torch.randn(4, 7),
        "num_items_in_batch": torch.tensor(9.0),
    }


def test_zero_advantage_policy_keeps_only_rows_with_gradient_and_trims_columns():
    out, done = compact_micro_batch(_batch(), "zero_advantage")
    assert out["completion_ids"].tolist() == [[100, 101, 102, 103, 104], [107, 108, 109, 110, 111]]
    assert out["prompt_ids"].tolist() == [[1, 2, 3, 4, 5], [7, 8, 9, 10, 11]]
    assert out["advantages"].tolist() == pytest.approx([0.7, -0.7])
    assert out["sampling_per_token_logps"].shape == (2, 5) and out["tool_mask"].shape == (2, 5)
    assert out["num_items_in_batch"].item() == 9.0
    assert (done.rows_before, done.rows_after) == (4, 2)
    assert done.positions_before == 4 * 13 and done.positions_after == 2 * 10


def test_masked_policy_keeps_zero_advantage_rows_with_tokens_and_drops_placeholders():
    out, done = compact_micro_batch(_batch(), "masked")
    assert done.rows_after == 3 and out["advantages"].tolist() == pytest.approx([0.7, -0.7, 0.0])
    assert out["completion_ids"].shape == (3, 7) and out["prompt_ids"].shape == (3, 6)


def test_none_policy_keeps_every_row_and_only_trims_padding():
    batch = _batch()
    batch["completion_mask"][2, 4:] = 0
    out, done = compact_micro_batch(batch, "none")
    assert done.rows_after == 4 and out["completion_ids"].shape == (4, 5)
    assert out["prompt_ids"].shape == (4, 6)


def test_a_micro_batch_without_gradient_keeps_one_token_with_an_empty_loss_mask():
    batch = _batch()
    batch["advantages"] = torch.zeros(4)
    out, done = compact_micro_batch(batch, "zero_advantage")
    assert out["completion_ids"].shape == (1, 1) and out["prompt_ids"].shape == (1, 1)
    assert int((out["completion_mask"] * out["tool_mask"]).sum()) == 0
    assert done.rows_after == 1 and done.computed_fraction < 0.05
    assert batch["tool_mask"].sum() > 0  # the input is not modified


def test_vision_batches_are_left_alone():
    batch = _batch()
    batch["pixel_values"] = torch.zeros(4, 3)
    out, done = compact_micro_batch(batch, "zero_advantage")
    assert out["completion_ids"].shape == (4, 7) and done.computed_fraction == 1.0


def test_policy_follows_what_is_exact_for_the_loss_type():
    assert row_policy("dapo", 0.0, False) == "zero_advantage"
    assert row_policy("dapo", 0.04, False) == "masked"  # the KL term has a gradient at advantage 0
    assert row_policy("dapo", 0.0, True) == "masked"  # a batch-wide entropy quantile sees every row
    assert row_policy("bnpo", 0.0, False) == "masked"
    assert row_policy("grpo", 0.0, False) == "none" and row_policy("dr_grpo", 0.0, False) == "none"


@pytest.mark.slow
@pytest.mark.parametrize("loss_type", ["dapo", "bnpo", "grpo"])
def test_trl_loss_and_gradient_are_unchanged_on_the_tiny_model(tmp_path, tiny_smollm2_model_dir, loss_type):
    import trl

    from test_train_rl import _build, _config

    config = _config(
        tmp_path, tiny_smollm2_model_dir, max_steps=1, **{"optim.loss_type": loss_type, "logging.report_to": "[]"}
    )
    run, _ = _build(config)
    trainer = run.trainer
    try:
        model = trainer.model
        model.train()
        if not hasattr(trainer, "current_gradient_accumulation_steps"):
            trainer.current_gradient_accumulation_steps = 1
        batch = _batch()
        vocab = model.config.vocab_size
        batch["prompt_ids"] = batch["prompt_ids"] % vocab
        batch["completion_ids"] = batch["completion_ids"] % vocab
        batch.pop("sampling_per_token_logps")
        params = [p for p in model.parameters() if p.requires_grad]

        def loss_and_grads(fn: Any) -> tuple[float, list[torch.Tensor]]:
            model.zero_grad()
            loss = fn(trainer, model, dict(batch))
            loss.backward()
            return float(loss.detach()), [
                p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in params
            ]

        ref_loss, ref_grads = loss_and_grads(trl.GRPOTrainer.compute_loss)
        loss, grads = loss_and_grads(type(trainer).compute_loss)
        assert loss == pytest.approx(ref_loss, rel=1e-4, abs=1e-6)
        assert any(float(g.abs().sum()) > 0 for g in ref_grads)  # the check can fail
        for g, r in zip(grads, ref_grads):
            torch.testing.assert_close(g, r, rtol=1e-3, atol=1e-6)
        computed = trainer._metrics["train"]["tirl/update/computed_fraction"]
        # grpo keeps every row, and row 2 spans the whole prompt and completion: nothing to cut
        assert computed and (computed[-1] == 1.0 if loss_type == "grpo" else computed[-1] < 1.0)
    finally:
        run.close()
