"""High-entropy token loss mask (``optim.retain_high_entropy_token_ratio``): the rule, and inside TRL's loss."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from tirl.algo.entropy_mask import keep_count, top_entropy_mask
from tirl.train.config import load_config


def test_keeps_exactly_the_fraction_of_each_sequence():
    g = torch.Generator().manual_seed(0)
    ent = torch.rand(6, 40, generator=g)
    mask = (torch.rand(6, 40, generator=g) > 0.3).int()
    for ratio in (0.2, 0.25, 0.5, 1.0):
        out = top_entropy_mask(ent, mask, ratio)
        for b in range(6):
            n = int(mask[b].sum())
            assert int(out[b].sum()) == math.ceil(ratio * n - 1e-9)
            kept = ent[b][out[b]]
            dropped = ent[b][mask[b].bool() & ~out[b]]
            if len(dropped):
                assert kept.min() >= dropped.max()  # the highest-entropy ones


def test_masked_out_tokens_never_enter_even_with_the_highest_entropy():
    ent = torch.tensor([[9.0, 0.1, 8.0, 0.2, 0.3, 0.4]])
    mask = torch.tensor([[0, 1, 0, 1, 1, 1]])  # injected tool tokens carry the largest entropies
    out = top_entropy_mask(ent, mask, 0.5)
    assert out.tolist() == [[False, False, False, False, True, True]]


def test_ranking_is_per_sequence_not_per_batch():
    # row 0 is confident everywhere, row 1 uncertain: a batch-wide threshold would keep nothing of row 0
    ent = torch.tensor([[0.1, 0.2, 0.3, 0.4], [5.0, 6.0, 7.0, 8.0]])
    mask = torch.ones_like(ent, dtype=torch.int)
    out = top_entropy_mask(ent, mask, 0.5)
    assert out.sum(-1).tolist() == [2, 2] and out[0].tolist() == [False, False, True, True]


def test_ties_keep_earlier_positions_and_empty_rows_keep_nothing():
    ent = torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [0, 0, 0, 0]])
    out = top_entropy_mask(ent, mask, 0.5)
    assert out.tolist() == [[True, True, False, False], [False] * 4]


@pytest.mark.parametrize("ratio", [0.0, -0.1, 1.5])
def test_ratio_outside_zero_one_is_refused(ratio):
    with pytest.raises(ValueError):
        keep_count(10, ratio)
    with pytest.raises(ValueError):
        load_config(None, [f"optim.retain_high_entropy_token_ratio={ratio}"]).validate()


def test_off_by_default_and_scope_checked():
    cfg = load_config(None, [])
    assert cfg.optim.retain_high_entropy_token_ratio == 1.0 and cfg.optim.entropy_mask_scope == "sequence"
    with pytest.raises(ValueError, match="entropy_mask_scope"):
        load_config(None, ["optim.entropy_mask_scope=token"]).validate()


@pytest.mark.slow
def test_trl_loss_uses_the_per_sequence_mask_on_the_tiny_model(tmp_path, tiny_smollm2_model_dir):
    from test_train_rl import _build, _config

    config = _config(
        tmp_path,
        tiny_smollm2_model_dir,
        max_steps=1,
        **{"optim.retain_high_entropy_token_ratio": 0.25, "logging.report_to": "[]"},
    )
    run, _ = _build(config)
    trainer = run.trainer
    assert trainer.top_entropy_quantile == 0.25
    seen: list[tuple[Any, Any, Any]] = []
    original = trainer.get_high_entropy_mask

    def spy(entropies: Any, mask: Any, threshold: float) -> Any:
        out = original(entropies, mask, threshold)
        seen.append((entropies.detach().clone(), mask.detach().clone(), out.detach().clone()))
        return out

    trainer.get_high_entropy_mask = spy
    try:
        trainer.train()
    finally:
        run.close()
    assert seen, "TRL's loss never asked for the entropy mask"
    rows = 0
    inner_gaps = 0
    for _ent, mask, out in seen:
        for row in mask.int().tolist():  # a 0 between 1s: an injected tool segment already excluded by TRL
            ones = [i for i, m in enumerate(row) if m]
            inner_gaps += bool(ones) and 0 in row[ones[0] : ones[-1]]
        assert not (out & ~mask.bool()).any()  # padding and injected tool tokens never enter
        for b in range(mask.shape[0]):
            n = int(mask[b].sum())
            assert int(out[b].sum()) == math.ceil(0.25 * n - 1e-9)
            rows += n > 1
    assert rows >= 2 and inner_gaps >= 1
