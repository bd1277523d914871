"""TRL's fused LM head on CPU under tirl: only the labelled (completion) positions are projected over the
vocabulary, with the same log-probabilities and entropies as TRL's every-position path
(:func:`tirl.train.common.score_completion_positions_only`), in the RL trainer and in SFT's loss."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")


def _record_scored_positions(monkeypatch) -> tuple[Any, list[int]]:
    """TRL's ``trl.trainer.utils`` with its own ``_use_triton`` choice (as a process that has built no trainer yet
    has it; a trainer built earlier replaced it for good) and its chunked log-prob function wrapped to record the
    number of positions each call scores. Both restored at teardown. Returns the module and that list."""
    import trl.kernels.chunked_logprob

    from tirl.train.trainer import trl

    utils = trl.trainer.utils
    monkeypatch.setattr(utils, "_use_triton", trl.kernels.chunked_logprob._use_triton)
    scored: list[int] = []
    chunked = utils._ChunkedLogProbFunction

    class Recording:
        @staticmethod
        def apply(hidden, *args):
            scored.append(hidden.shape[0])
            return chunked.apply(hidden, *args)

    monkeypatch.setattr(utils, "_ChunkedLogProbFunction", Recording)
    return utils, scored


@pytest.fixture
def fused_model(tiny_smollm2_model_dir, monkeypatch):
    """The tiny SmolLM2 model with TRL's fused LM head, a recorder of the positions its chunked log-prob is
    handed, and TRL's own ``trl.trainer.utils._use_triton`` for the test (a trainer built earlier in this process
    replaced it for good), restored at teardown."""
    from transformers import AutoModelForCausalLM

    utils, scored = _record_scored_positions(monkeypatch)
    model = AutoModelForCausalLM.from_pretrained(tiny_smollm2_model_dir)
    utils.add_fused_lm_head(model, temperature=0.7, outputs=("log_probs", "entropy"))
    return model, scored


def _batch(model) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Input ids, labels, attention mask of 2 rows of 12 tokens: an 8-token prompt, then 4 completion tokens (row
    1: 3, then a padding position)."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (2, 12), generator=gen)
    attention = torch.ones_like(ids)
    attention[1, -1] = 0
    labels = ids.masked_fill(attention == 0, -100)
    labels[:, :8] = -100
    return ids, labels, attention


def test_only_the_labelled_positions_are_scored_and_their_values_are_unchanged(fused_model):
    from tirl.train.common import score_completion_positions_only
    from tirl.train.trainer import trl

    model, scored = fused_model
    ids, labels, attention = _batch(model)
    with torch.no_grad():
        every = model(input_ids=ids, attention_mask=attention, labels=labels, fused_lm_head=True)
    assert scored == [2 * 11]  # TRL on CPU: every shifted position, prompt and padding included
    score_completion_positions_only()
    score_completion_positions_only()  # idempotent: wraps TRL's choice once
    assert trl.trainer.utils._use_triton(torch.device("cpu"))
    with torch.no_grad():
        compact = model(input_ids=ids, attention_mask=attention, labels=labels, fused_lm_head=True)
    labelled = labels[:, 1:] != -100
    assert scored[1] == int(labelled.sum()) == 7  # 4 + 3 completion tokens
    assert compact.log_probs.shape == every.log_probs.shape == labelled.shape
    torch.testing.assert_close(compact.log_probs, every.log_probs, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(compact.entropy, every.entropy, rtol=1e-5, atol=1e-6)
    assert bool((compact.log_probs[~labelled] == 0).all()) and bool((compact.log_probs[labelled] < 0).all())
    # and they are the log-softmax of the model's own logits at temperature 0.7
    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1] / 0.7
    want = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(compact.log_probs[labelled], want[labelled], rtol=1e-4, atol=1e-5)


def test_the_gradient_is_the_same(fused_model):
    from tirl.train.common import score_completion_positions_only

    model, _ = fused_model
    ids, labels, attention = _batch(model)

    def grads() -> list[torch.Tensor]:
        model.zero_grad()
        out = model(input_ids=ids, attention_mask=attention, labels=labels, fused_lm_head=True)
        (out.log_probs.sum() + out.entropy.sum()).backward()
        return [p.grad.clone() for p in model.parameters()]

    every = grads()
    score_completion_positions_only()
    for mine, ref in zip(grads(), every, strict=True):
        # the unlabelled positions add zero rows to the weight gradient's sum either way, but a sum of another
        # shape rounds differently: equal to float32 rounding relative to the whole gradient
        assert float((mine - ref).norm()) <= 1e-5 * float(ref.norm()) + 1e-8


def test_other_devices_keep_trls_choice(monkeypatch):
    from tirl.train.common import score_completion_positions_only
    from tirl.train.trainer import trl

    utils = trl.trainer.utils
    monkeypatch.setattr(utils, "_use_triton", lambda device: device.type == "cuda")  # TRL's, on a Triton machine
    score_completion_positions_only()
    assert utils._use_triton(torch.device("cpu")) and utils._use_triton(torch.device("cuda"))
    assert not utils._use_triton(torch.device("meta"))  # e.g. Neuron: every position, no recompilation


def test_an_sft_step_scores_only_the_labelled_positions(tiny_smollm2_model_dir, tmp_path, monkeypatch):
    """``build_sft_trainer`` makes the SFT loss compact on CPU too: a step of one conversation hands TRL's chunked
    log-prob exactly its labelled (shifted) positions, the model's turns, not every position of the row."""
    from tirl.data.sft import load_sft_set
    from tirl.train.sft import build_sft_trainer
    from tirl.train.sft_config import load_sft_config

    _, scored = _record_scored_positions(monkeypatch)
    config = load_sft_config(
        None,
        [
            f"model.name_or_path={tiny_smollm2_model_dir}",
            "model.dtype=float32",
            f"output_dir={tmp_path / 'run'}",
            "data.max_length=4096",
            "optim.batch_size=1",
            "optim.per_device_train_batch_size=1",
            "optim.max_steps=1",
            "save_steps=100",
            "logging.console=false",
        ],
    )
    built = build_sft_trainer(config, examples=load_sft_set("gsm8k_tir", slice(0, 1)))
    built.trainer.train()
    [row] = built.trainer.train_dataset
    labelled = sum(label != -100 for label in row["labels"][1:])
    assert scored == [labelled] and 0 < labelled < len(row["input_ids"]) // 2
