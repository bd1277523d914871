"""tirl.models.token_rows: never-trained tag rows re-initialised from their spelling."""

from __future__ import annotations

import pytest
import torch

from tirl.models.token_rows import init_token_rows, spelling_ids

TAGS = ["<tool_call>", "</tool_call>"]


def test_spelling_bypasses_the_added_token_table(qwen_tokenizer):
    for tag in TAGS:
        ids = spelling_ids(qwen_tokenizer, tag)
        assert len(ids) > 1 and qwen_tokenizer.get_vocab()[tag] not in ids
        assert qwen_tokenizer.decode(ids) == tag


@pytest.mark.parametrize("tied", [True, False])
def test_rows_become_spelling_means_and_nothing_else_moves(tiny_model_dir, qwen_tokenizer, tied):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    if not tied:
        model.config.tie_word_embeddings = False
        model.lm_head.weight = torch.nn.Parameter(model.get_input_embeddings().weight.detach().clone() * 2)
    vocab = qwen_tokenizer.get_vocab()
    embed_w, head_w = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    with torch.no_grad():  # the Qwen2.5-Coder situation: both tags share one row
        for w in (embed_w, head_w):
            w[vocab["</tool_call>"]] = w[vocab["<tool_call>"]]
    embed_before, head_before = embed_w.detach().clone(), head_w.detach().clone()

    done = init_token_rows(model, qwen_tokenizer, TAGS)
    assert set(done) == set(TAGS)
    embed, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    changed = {vocab[t] for t in TAGS}
    for weight, before in ((embed, embed_before), (head, head_before)):
        for tag in TAGS:
            expected = before[spelling_ids(qwen_tokenizer, tag)].mean(dim=0)
            assert torch.allclose(weight[vocab[tag]], expected, atol=1e-6)
        rest = [i for i in range(weight.shape[0]) if i not in changed]
        assert torch.equal(weight[rest], before[rest])
    assert not torch.allclose(embed[vocab["<tool_call>"]], embed[vocab["</tool_call>"]])
    assert (head is embed) == tied


def test_rejects_strings_that_are_not_one_token(tiny_model_dir, qwen_tokenizer, smollm2_tokenizer):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    before = model.get_input_embeddings().weight.detach().clone()
    with pytest.raises(ValueError, match="not-a-token"):
        init_token_rows(model, qwen_tokenizer, ["<tool_call>", "not-a-token"])
    assert torch.equal(model.get_input_embeddings().weight, before)  # checked before anything is written
    with pytest.raises(ValueError, match="not single tokens"):  # SmolLM2 has no <tool_call> entry
        init_token_rows(model, smollm2_tokenizer, ["<tool_call>"])
    with pytest.raises(ValueError, match="spells to itself"):
        init_token_rows(model, qwen_tokenizer, ["hello"])
