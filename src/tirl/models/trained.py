"""Models trained with tirl that ship inside the package: small weight deltas on a packaged base model.

A trained model lives in ``tirl/models/trained/<name>/``: ``manifest.json`` (base model, adapters in the order
they were trained, protocol the model was trained with), the trained embedding rows
(``token_rows.safetensors``), one folder per LoRA adapter (peft ``adapter_config.json`` and
``adapter_model.safetensors``, stored in float16 to keep the package small) and ``PROVENANCE.md`` (the exact
commands, configs, data, seeds, steps and the metrics they reached).

:func:`build_trained_model` turns it into a plain HF folder once (cached like the converted GGUF models, see
:mod:`tirl.models.loading`): the base model in float32, the trained rows put back, then each adapter merged in
order (the SFT stage's adapter, then the RL stage's, exactly as the RL stage started from the merged SFT model).
:func:`export_trained_model` writes such a folder from training checkpoints, and
:func:`build_adapter_checkpoint` merges one LoRA checkpoint folder (so ``tirl eval --model
runs/x/checkpoint-10`` evaluates a checkpoint).

Not covered: training (``tirl train sft|rl``), adapters of other bases than the packaged models.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TRAINED_DIR = Path(__file__).resolve().parent / "trained"
"""Where the packaged trained models live (one folder each)."""

MANIFEST = "manifest.json"
ROWS_FILE = "token_rows.safetensors"


@dataclass(frozen=True)
class TrainedModel:
    """One packaged trained model (read from its ``manifest.json``).

    Attributes:
        name: the name users pass (``tirl eval --model NAME``).
        base: the built-in base model it was trained from.
        adapters: adapter folder names inside :attr:`folder`, in training order.
        prompt_style: the protocol's ``prompt_style`` it was trained with (evaluate it with the same).
        description: one line for listings.
        folder: the model's folder inside the package.
    """

    name: str
    base: str
    adapters: tuple[str, ...]
    prompt_style: str
    description: str
    folder: Path

    def fingerprint(self) -> str:
        """A short hash of the files, so that a changed package rebuilds its cached folder."""
        import hashlib

        digest = hashlib.sha256()
        for f in sorted(self.folder.rglob("*")):
            if f.is_file() and f.name != "PROVENANCE.md":
                digest.update(f.relative_to(self.folder).as_posix().encode())
                digest.update(f.read_bytes())
        return digest.hexdigest()[:12]


def trained_models() -> dict[str, TrainedModel]:
    """The packaged trained models by name (empty when none ships)."""
    out: dict[str, TrainedModel] = {}
    if not TRAINED_DIR.is_dir():
        return out
    for manifest in sorted(TRAINED_DIR.glob(f"*/{MANIFEST}")):
        data = json.loads(manifest.read_text(encoding="utf-8"))
        out[data["name"]] = TrainedModel(
            name=data["name"],
            base=data["base"],
            adapters=tuple(data["adapters"]),
            prompt_style=data.get("prompt_style", "full"),
            description=data.get("description", ""),
            folder=manifest.parent,
        )
    return out


def _save_folder(model: Any, out_dir: Path, base_dir: Path, tokenizer_dir: Path) -> None:
    """Write a merged model as a plain HF folder: weights, the tokenizer of ``tokenizer_dir``, and the base's
    generation config and tirl source record (stop ids)."""
    from transformers import AutoTokenizer

    model.save_pretrained(str(out_dir))
    AutoTokenizer.from_pretrained(str(tokenizer_dir)).save_pretrained(str(out_dir))
    for extra in ("generation_config.json", "tirl_source.json"):
        if (base_dir / extra).is_file():
            shutil.copy(base_dir / extra, out_dir / extra)


def build_trained_model(spec: TrainedModel, out_dir: Path) -> None:
    """Write the merged HF folder of ``spec`` into ``out_dir`` (base in float32, rows, adapters merged in order).

    Raises:
        tirl.models.ModelNotFoundError: the base model's packages are not installed.
        ValueError: the rows file does not fit the base model.
    """
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from tirl.models.loading import resolve
    from tirl.models.token_rows import row_weights

    base_dir = resolve(spec.base)
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    rows = load_file(str(spec.folder / ROWS_FILE))
    ids = rows["ids"].tolist()
    weights = row_weights(model)
    if sum(1 for k in rows if k.startswith("rows.")) != len(weights):
        raise ValueError(f"{spec.folder / ROWS_FILE} was written for a model with another embedding layout")
    with torch.no_grad():
        for i, w in enumerate(weights):
            w[ids] = rows[f"rows.{i}"].to(w.dtype)
    for name in spec.adapters:
        model = PeftModel.from_pretrained(model, str(spec.folder / name), torch_dtype=torch.float32)
        model = model.merge_and_unload()
    _save_folder(model, out_dir, base_dir, base_dir)
    (out_dir / "tirl_trained.json").write_text(json.dumps({"name": spec.name, "fingerprint": spec.fingerprint()}))


def build_adapter_checkpoint(folder: Path, out_dir: Path) -> None:
    """Write the merged HF folder of a LoRA checkpoint (``checkpoint-N`` of ``tirl train sft|rl`` with LoRA):
    the base named by its ``adapter_config.json`` in float32, the trained rows of ``tirl_token_rows.pt`` when
    the folder has them (SFT checkpoints), then the adapter merged. The tokenizer is the checkpoint's own when it
    has one, else the base's.

    Raises:
        tirl.models.ModelNotFoundError: the base cannot be found.
    """
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from tirl.models.loading import resolve
    from tirl.models.token_rows import load_token_rows

    base_ref = json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"]
    base_dir = resolve(base_ref)
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    load_token_rows(model, folder)
    model = PeftModel.from_pretrained(model, str(folder), torch_dtype=torch.float32).merge_and_unload()
    _save_folder(model, out_dir, base_dir, folder if (folder / "tokenizer_config.json").is_file() else base_dir)


def export_trained_model(
    out_dir: str | Path, *, name: str, base: str, checkpoints: Sequence[str | Path], prompt_style: str, description: str
) -> Path:
    """Write a packaged trained model from training checkpoints.

    Args:
        out_dir: the model's folder (``src/tirl/models/trained/<name>`` to ship it).
        name: its name.
        base: the built-in base model.
        checkpoints: ``checkpoint-N`` (or adapter) folders in training order; the first must hold the trained
            rows (``tirl_token_rows.pt``, written by the SFT stage with ``model.train_token_rows``).
        prompt_style: the protocol's prompt style of the training runs.
        description: one line.

    Returns:
        ``out_dir``. The adapters are stored in float16; ``PROVENANCE.md`` is left for the caller to write.

    Raises:
        FileNotFoundError: a checkpoint without ``adapter_model.safetensors``, or no rows in the first one.
    """
    import torch
    from safetensors.torch import load_file, save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows_pt = Path(checkpoints[0]) / "tirl_token_rows.pt"
    if not rows_pt.is_file():
        raise FileNotFoundError(f"{rows_pt} not found: the first checkpoint must be the SFT stage's")
    saved = torch.load(rows_pt, map_location="cpu")
    tensors = {"ids": torch.tensor(saved["ids"], dtype=torch.int64)}
    tensors.update({f"rows.{i}": r.to(torch.float32).contiguous() for i, r in enumerate(saved["rows"])})
    save_file(tensors, str(out / ROWS_FILE))
    names = []
    for i, ckpt in enumerate(checkpoints):
        ckpt = Path(ckpt)
        weights = ckpt / "adapter_model.safetensors"
        if not weights.is_file():
            raise FileNotFoundError(f"{weights} not found: not a LoRA checkpoint")
        name_i = f"adapter{i}"
        (out / name_i).mkdir(exist_ok=True)
        state = {k: v.to(torch.float16).contiguous() for k, v in load_file(str(weights)).items()}
        save_file(state, str(out / name_i / "adapter_model.safetensors"))
        config = json.loads((ckpt / "adapter_config.json").read_text())
        config["base_model_name_or_path"] = base
        (out / name_i / "adapter_config.json").write_text(json.dumps(config, indent=1, sort_keys=True))
        names.append(name_i)
    (out / MANIFEST).write_text(
        json.dumps(
            {"name": name, "base": base, "adapters": names, "prompt_style": prompt_style, "description": description},
            indent=1,
        )
        + "\n"
    )
    return out


__all__ = [
    "TRAINED_DIR",
    "TrainedModel",
    "build_adapter_checkpoint",
    "build_trained_model",
    "export_trained_model",
    "trained_models",
]
