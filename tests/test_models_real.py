"""Tests on the real packaged models: GGUF conversion, end-of-turn settings, generation through HFEngine.

The Qwen conversion takes about 50 s the first time on 2 cores and is cached under ``$TIRL_CACHE`` after.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from tirl.models import generation_eos_ids, load_tokenizer, resolve  # noqa: E402
from tirl.models.builtin import builtin_gguf  # noqa: E402
from tirl.rollout.engine import SamplingParams  # noqa: E402
from tirl.rollout.hf_engine import HFEngine  # noqa: E402

pytestmark = [pytest.mark.model, pytest.mark.slow(seconds=45)]


def _chat_ids(tok, text):
    ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


async def _greedy_turn(folder, tok, max_new_tokens):
    engine = HFEngine.from_pretrained(folder)
    stops = generation_eos_ids(folder)
    out = await engine.generate(
        _chat_ids(tok, "What is 2+3? Reply with the number only."),
        SamplingParams(max_new_tokens=max_new_tokens, temperature=0, stop_token_ids=stops),
    )
    return out, stops


async def test_smollm2_builtin_converts_and_ends_its_turn_with_im_end():
    folder = resolve("smollm2-135m-instruct")
    tok = load_tokenizer(folder)
    gen = json.loads((folder / "generation_config.json").read_text())
    assert tok.convert_ids_to_tokens(gen["eos_token_id"]) == ["<|im_end|>"]
    out, stops = await _greedy_turn(folder, tok, 40)
    assert out.finish_reason == "stop" and out.token_ids[-1] == stops[0]
    assert len(out.logprobs) == len(out.token_ids) and all(lp <= 0 for lp in out.logprobs)


def test_converted_smollm2_matches_the_gguf_checkpoint():
    """The cached HF folder computes what transformers' GGUF loader computes (up to bf16 storage)."""
    from transformers import AutoModelForCausalLM

    gguf = builtin_gguf("smollm2-135m-instruct")
    folder = resolve("smollm2-135m-instruct")
    tok = load_tokenizer(folder)
    converted = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    direct = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    ids = torch.tensor([_chat_ids(tok, "Name three prime numbers.")])
    with torch.no_grad():
        a, b = converted(ids).logits[0], direct(ids).logits[0]
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() >= 0.95
    assert torch.allclose(a.softmax(-1), b.softmax(-1), atol=0.02)


def test_a_user_gguf_file_gets_its_tokenizer_and_end_of_turn_detected(tmp_path, monkeypatch):
    """A GGUF given by path (not a built-in name): the end-of-turn token is detected from its chat template."""
    monkeypatch.setenv("TIRL_CACHE", str(tmp_path / "cache"))
    gguf = builtin_gguf("smollm2-135m-instruct")
    tok = load_tokenizer(gguf)
    assert tok.eos_token == "<|im_end|>"
    assert tok.convert_ids_to_tokens(generation_eos_ids(gguf))[0] == "<|im_end|>"
    assert [p.name.startswith("gguf-SmolLM2") for p in (tmp_path / "cache" / "tokenizers").iterdir() if p.is_dir()] == [
        True
    ]
    assert not (tmp_path / "cache" / "models").exists()  # no weights converted for a tokenizer


async def test_qwen_builtin_has_tool_template_stop_ids_and_answers(qwen_tokenizer):
    folder = resolve("qwen2.5-coder-0.5b-instruct")
    tok = load_tokenizer(folder)
    assert tok.get_vocab() == qwen_tokenizer.get_vocab()
    assert "<tool_call>" in tok.chat_template and "<tool_response>" in tok.chat_template
    gen = json.loads((folder / "generation_config.json").read_text())
    assert tok.convert_ids_to_tokens(gen["eos_token_id"]) == ["<|im_end|>", "<|endoftext|>"]
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"] and "quantization_config" not in config
    out, stops = await _greedy_turn(folder, tok, 30)
    assert out.finish_reason == "stop" and out.token_ids[-1] == stops[0]
