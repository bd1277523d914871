"""Converting a GGUF checkpoint into a plain Hugging Face folder (dequantized weights, tokenizer, chat template).

Covers the one-time conversion done by :func:`tirl.models.resolve` for GGUF inputs: transformers' GGUF loader
dequantizes the weights; the result is saved as ``config.json`` + ``model.safetensors`` + tokenizer files +
``generation_config.json`` whose ``eos_token_id`` lists the end-of-turn token (``<|im_end|>`` for ChatML
models) and the model's end-of-text token, so that ``generate`` and TRL stop at the end of an assistant turn.
It also builds tokenizer-only folders (no weights) for callers that need just the tokenizer.

It does not decide where the results are cached (:mod:`tirl.models.loading`) nor locate packaged GGUF files
(:mod:`tirl.models.builtin`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Tokens that end an assistant turn in common chat templates, in order of preference.
END_OF_TURN_CANDIDATES = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>")


def end_of_turn_token(tokenizer: Any) -> str:
    """The token that ends an assistant turn for ``tokenizer``'s chat template.

    The first of :data:`END_OF_TURN_CANDIDATES` that both appears in the chat template and is a single token
    of the vocabulary; otherwise the tokenizer's ``eos_token``.

    Raises:
        ValueError: neither a known end-of-turn token nor an ``eos_token`` exists.
    """
    template = tokenizer.chat_template if isinstance(getattr(tokenizer, "chat_template", None), str) else ""
    vocab = tokenizer.get_vocab()
    for tok in END_OF_TURN_CANDIDATES:
        if tok in template and tok in vocab:
            return tok
    if tokenizer.eos_token is None:
        raise ValueError("the tokenizer has no chat-template end-of-turn token and no eos_token")
    return tokenizer.eos_token


def prepare_tokenizer(tokenizer: Any, end_of_turn: str | None = None, extra_eos: tuple[str, ...] = ()) -> list[int]:
    """Make ``tokenizer``'s eos the end-of-turn token and give it a pad token; return the stop ids.

    Args:
        tokenizer: a transformers tokenizer (modified in place).
        end_of_turn: the end-of-turn token; detected with :func:`end_of_turn_token` when ``None``.
        extra_eos: further tokens that also end generation (e.g. ``<|endoftext|>``).

    Returns:
        The stop token ids, end-of-turn first (what ``generation_config.eos_token_id`` should hold).
    """
    end_of_turn = end_of_turn or end_of_turn_token(tokenizer)
    old_eos = tokenizer.eos_token
    tokenizer.eos_token = end_of_turn
    if tokenizer.pad_token is None:
        tokenizer.pad_token = extra_eos[0] if extra_eos else (old_eos or end_of_turn)
    stops = [tokenizer.convert_tokens_to_ids(end_of_turn)]
    for tok in (*extra_eos, old_eos):
        if tok is not None and tok in tokenizer.get_vocab():
            tid = tokenizer.convert_tokens_to_ids(tok)
            if tid not in stops:
                stops.append(tid)
    return stops


def tokenizer_from_gguf(gguf_file: Path) -> Any:
    """Load the tokenizer (with its chat template) embedded in a GGUF file. Reads metadata only (seconds)."""
    from transformers import AutoTokenizer

    gguf_file = Path(gguf_file)
    return AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)


def save_tokenizer_folder(
    gguf_file: Path, out_dir: Path, *, end_of_turn: str | None = None, extra_eos: tuple[str, ...] = ()
) -> Path:
    """Write the GGUF's tokenizer as a plain HF tokenizer folder at ``out_dir`` (no weights)."""
    tok = tokenizer_from_gguf(gguf_file)
    stops = prepare_tokenizer(tok, end_of_turn, extra_eos)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True)
    tok.save_pretrained(str(out_dir))
    _write_source(out_dir, gguf_file, stops, weights=False)
    return out_dir


def convert_gguf(
    gguf_file: Path,
    out_dir: Path,
    *,
    dtype: str = "bfloat16",
    end_of_turn: str | None = None,
    extra_eos: tuple[str, ...] = (),
) -> Path:
    """Dequantize ``gguf_file`` and save it as a plain HF model folder at ``out_dir``.

    Takes about 50 s and 2 GB of RAM for the 0.5B Qwen model on 2 cores. transformers 5 refuses
    ``save_pretrained`` on a GGUF-loaded model while it carries a quantizer, so the quantizer and
    ``config.quantization_config`` are dropped first (the weights are already dequantized tensors).

    Args:
        gguf_file: the ``.gguf`` file.
        out_dir: folder to create (must not exist).
        dtype: dtype of the saved weights (``bfloat16`` or ``float32``); Q4 quantization error dwarfs
            bf16 rounding, so bf16 halves the size for nothing material.
        end_of_turn, extra_eos: see :func:`prepare_tokenizer`.

    Returns:
        ``out_dir``.
    """
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    gguf_file = Path(gguf_file)
    tok = tokenizer_from_gguf(gguf_file)
    stops = prepare_tokenizer(tok, end_of_turn, extra_eos)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf_file.parent), gguf_file=gguf_file.name, dtype=getattr(torch, dtype)
    )
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.eos_token_id = stops[0]
    model.config.pad_token_id = tok.pad_token_id
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=stops, pad_token_id=tok.pad_token_id
    )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True)
    model.save_pretrained(str(out_dir))
    tok.save_pretrained(str(out_dir))
    _write_source(out_dir, gguf_file, stops, weights=True)
    return out_dir


def _write_source(out_dir: Path, gguf_file: Path, stops: list[int], *, weights: bool) -> None:
    (out_dir / "tirl_source.json").write_text(
        json.dumps({"converted_from": str(gguf_file), "stop_token_ids": stops, "weights": weights}, indent=2) + "\n"
    )
