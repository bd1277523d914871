"""Packaged trained models: export from checkpoints, build once, and equal to merging by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def _fake_checkpoints(tmp: Path, model_dir: Path) -> tuple[list[Path], list[int]]:
    """An 'SFT' checkpoint (LoRA + trained rows) and an 'RL' checkpoint (another LoRA), random weights."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from tirl.train.token_rows import save_token_rows

    torch.manual_seed(0)
    ids = [5, 17]
    base = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    with torch.no_grad():
        base.get_input_embeddings().weight[ids] = torch.randn(2, base.config.hidden_size)
    cks = []
    model = base
    for i in range(2):
        peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
        with torch.no_grad():
            for n, p in peft_model.named_parameters():
                if "lora_B" in n:
                    p.copy_(torch.randn_like(p) * 0.05)
        ck = tmp / f"checkpoint-{i}"
        peft_model.save_pretrained(str(ck))
        if i == 0:
            save_token_rows(peft_model, ids, ck)
        model = peft_model.merge_and_unload()
        cks.append(ck)
    torch.save(model.state_dict(), tmp / "expected.pt")
    return cks, ids


@pytest.fixture()
def packaged(tmp_path, tiny_model_dir, monkeypatch):
    from tirl.models import trained as trained_mod
    from tirl.models.trained import export_trained_model

    cks, _ = _fake_checkpoints(tmp_path, tiny_model_dir)
    root = tmp_path / "trained"
    export_trained_model(
        root / "tiny-tirl",
        name="tiny-tirl",
        base=str(tiny_model_dir),
        checkpoints=cks,
        prompt_style="compact",
        description="test",
    )
    monkeypatch.setattr(trained_mod, "TRAINED_DIR", root)
    monkeypatch.setenv("TIRL_CACHE", str(tmp_path / "cache"))
    return tmp_path


def test_exported_adapters_are_float16_and_small(packaged):
    from safetensors.torch import load_file

    folder = packaged / "trained" / "tiny-tirl"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["adapters"] == ["adapter0", "adapter1"] and manifest["prompt_style"] == "compact"
    for name in manifest["adapters"]:
        assert {str(t.dtype) for t in load_file(str(folder / name / "adapter_model.safetensors")).values()} == {
            "torch.float16"
        }


def test_a_packaged_model_resolves_by_name_to_the_merged_weights(packaged):
    import torch
    from transformers import AutoModelForCausalLM

    from tirl.models import resolve

    folder = resolve("tiny-tirl")
    assert (folder / "config.json").is_file() and "tiny-tirl" in folder.name
    built = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).state_dict()
    expected = torch.load(packaged / "expected.pt")
    worst = max(float((built[k] - v).abs().max()) for k, v in expected.items())
    assert worst < 1e-3  # the adapters were stored in float16
    assert resolve("tiny-tirl") == folder  # built once


def test_the_tokenizer_of_a_packaged_model_is_its_bases(packaged, tiny_model_dir):
    from tirl.models import load_tokenizer

    tok = load_tokenizer("tiny-tirl")
    assert tok.encode("hello <tool_call>") == load_tokenizer(str(tiny_model_dir)).encode("hello <tool_call>")


def test_export_needs_the_sft_rows_first(tmp_path, tiny_model_dir):
    from tirl.models.trained import export_trained_model

    empty = tmp_path / "ck"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="SFT"):
        export_trained_model(
            tmp_path / "out", name="x", base="b", checkpoints=[empty], prompt_style="full", description=""
        )


def test_a_lora_checkpoint_folder_is_a_model_reference(tmp_path, tiny_model_dir, monkeypatch):
    import torch
    from transformers import AutoModelForCausalLM

    from tirl.models import load_tokenizer, resolve

    monkeypatch.setenv("TIRL_CACHE", str(tmp_path / "cache"))
    cks, _ = _fake_checkpoints(tmp_path, tiny_model_dir)
    # checkpoint-0 holds the adapter and the trained rows on the base model
    folder = resolve(str(cks[0]))
    assert folder != cks[0] and (folder / "config.json").is_file()
    built = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    from peft import PeftModel

    from tirl.train.token_rows import load_token_rows

    ref = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    assert load_token_rows(ref, cks[0])
    ref = PeftModel.from_pretrained(ref, str(cks[0])).merge_and_unload()
    for k, v in ref.state_dict().items():
        assert torch.allclose(built.state_dict()[k], v, atol=1e-6), k
    assert load_tokenizer(str(cks[0])).encode("a b") == load_tokenizer(str(tiny_model_dir)).encode("a b")
