"""Tiny random causal LMs on a real tokenizer, for tests that need a model but not a skilled one.

Covers :func:`build_tiny_model` (a few million random parameters, the real tokenizer and its chat template,
saved as a normal HF folder loadable by ``from_pretrained`` and TRL) and :func:`cached_tiny_model` (the same,
built once under ``$TIRL_CACHE/tiny/``). Random weights sample near-uniformly over the vocabulary, so such a
model almost never emits the end-of-turn token: generations run to their token limit and tool calls are
nearly always absent or unparseable. That is the point: the pipeline must handle it.

Not covered: trained or distilled small models (see :mod:`tirl.models.builtin` for real ones).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tirl.models.cache import build_once, cache_dir
from tirl.models.gguf import prepare_tokenizer
from tirl.models.loading import generation_eos_ids, load_tokenizer


def build_tiny_model(
    tokenizer_name_or_path: str | Path,
    out_dir: str | Path,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    max_position_embeddings: int = 8192,
    initializer_range: float = 0.1,
    seed: int = 0,
) -> Path:
    """Build a random Qwen2-architecture model on a real tokenizer and save it as an HF folder.

    Parameter count is about ``vocab * hidden_size`` (tied embeddings) plus a little per layer: with the
    defaults, 3.2M for the SmolLM2 tokenizer (vocab 49,152) and 9.8M for the Qwen2.5 one (151,936).
    The weights depend only on the arguments (``seed``), not on the global torch RNG, which is left untouched.

    Args:
        tokenizer_name_or_path: any model reference accepted by :func:`tirl.models.load_tokenizer`.
        out_dir: folder to write (created; must not already hold a model).
        hidden_size, num_layers, num_heads, num_kv_heads, intermediate_size, max_position_embeddings:
            architecture (``hidden_size`` divisible by ``num_heads``, ``num_heads`` by ``num_kv_heads``).
        initializer_range: std of the random weights. 0.1 keeps sampling near-uniform (entropy about 11.6 nats
            of the 11.9 maximum on the Qwen vocabulary) while greedy decoding still varies between tokens
            (transformers' default 0.02 makes greedy decoding repeat one id).
        seed: weight-initialisation seed.

    Returns:
        ``out_dir`` holding ``config.json``, ``model.safetensors`` (float32), tokenizer files and
        ``generation_config.json`` with the end-of-turn stop ids as ``eos_token_id``.

    Raises:
        FileExistsError: ``out_dir`` already holds a ``config.json``.
        ValueError: inconsistent head counts.
    """
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out_dir = Path(out_dir)
    if (out_dir / "config.json").exists():
        raise FileExistsError(f"{out_dir} already holds a model")
    if hidden_size % num_heads or num_heads % num_kv_heads:
        raise ValueError("hidden_size must be divisible by num_heads, and num_heads by num_kv_heads")
    tok = load_tokenizer(tokenizer_name_or_path)
    stops = generation_eos_ids(tokenizer_name_or_path)
    for extra in prepare_tokenizer(tok, tok.convert_ids_to_tokens(stops[0])):
        if extra not in stops:
            stops.append(extra)
    vocab = max(len(tok), max(tok.get_vocab().values()) + 1)
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        initializer_range=initializer_range,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=stops[0],
        pad_token_id=tok.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=stops, pad_token_id=tok.pad_token_id
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir))
    tok.save_pretrained(str(out_dir))
    (out_dir / "tirl_source.json").write_text(
        json.dumps(
            {
                "tiny_random_from_tokenizer": str(tokenizer_name_or_path),
                "seed": seed,
                "stop_token_ids": stops,
                "weights": True,
            },
            indent=2,
        )
        + "\n"
    )
    return out_dir


_TINY_VERSION = 2  # bump when build_tiny_model's defaults change, so stale cached models are not reused


def cached_tiny_model(tokenizer_name_or_path: str | Path, **kwargs) -> Path:
    """:func:`build_tiny_model` into ``$TIRL_CACHE/tiny/<key>``, built once (safe across processes).

    The key hashes the tokenizer reference, ``kwargs`` and a version of the defaults; later calls with the same
    arguments return the same folder without rebuilding.
    """
    raw = json.dumps({"tok": str(tokenizer_name_or_path), "v": _TINY_VERSION, **kwargs}, sort_keys=True).encode()
    name = f"{Path(str(tokenizer_name_or_path)).name}-{hashlib.sha256(raw).hexdigest()[:12]}"
    return build_once(cache_dir() / "tiny" / name, lambda tmp: build_tiny_model(tokenizer_name_or_path, tmp, **kwargs))
