"""Models: built-in packaged models, GGUF conversion, loading, and tiny random models for tests.

Public API: :func:`resolve` (model reference -> plain HF folder), :func:`load` (-> ``(model, tokenizer)``),
:func:`load_tokenizer`, :func:`generation_eos_ids`, :func:`lora_adapter_folder`, :func:`is_adapter`,
:func:`model_reference` (``tiny:<tokenizer>`` smoke models), :func:`check_reference` (a name checked without
loading), :func:`build_tiny_model` / :func:`cached_tiny_model`, :data:`BUILTIN_MODELS`, :func:`cache_dir`.
Heavy libraries (torch, transformers) are imported lazily.
"""

from tirl.models.builtin import BUILTIN_MODELS, BuiltinModel, ModelNotFoundError
from tirl.models.cache import build_once, cache_dir
from tirl.models.loading import (
    check_reference,
    generation_eos_ids,
    is_adapter,
    load,
    load_tokenizer,
    lora_adapter_folder,
    model_reference,
    resolve,
    tokenizer_dir,
)
from tirl.models.tiny import build_tiny_model, cached_tiny_model

__all__ = [
    "BUILTIN_MODELS",
    "BuiltinModel",
    "ModelNotFoundError",
    "build_once",
    "build_tiny_model",
    "cache_dir",
    "cached_tiny_model",
    "check_reference",
    "generation_eos_ids",
    "is_adapter",
    "load",
    "load_tokenizer",
    "lora_adapter_folder",
    "model_reference",
    "resolve",
    "tokenizer_dir",
]
