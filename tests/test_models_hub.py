"""Model references that are Hugging Face Hub ids (``tirl.models.resolve``): resolved through huggingface_hub's
cache; with the hub unreachable and the model not cached, one line says so and how to fix it.

huggingface_hub reads its settings (HF_ENDPOINT, HF_HUB_CACHE, HF_HUB_OFFLINE) when it is imported, so each case
runs in a fresh interpreter with its own environment."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tirl.models.loading import HUB_ID, ModelNotFoundError, _classify

pytestmark = pytest.mark.slow  # each case starts an interpreter that imports transformers
SRC = Path(__file__).resolve().parents[1] / "src"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def closed_port() -> int:
    with socket.socket() as s:  # bound, then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_resolve(ref: str, cache: Path, *, offline: bool) -> subprocess.CompletedProcess:
    """``resolve(ref)`` then ``load_tokenizer(ref)`` in a fresh interpreter: prints both folders, or the error
    (exit 3)."""
    env = dict(
        os.environ,
        PYTHONPATH=str(SRC),
        HF_HUB_CACHE=str(cache),
        HF_HOME=str(cache.parent / "hf-home"),
        HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}",
        HF_HUB_OFFLINE="1" if offline else "0",
        HF_HUB_ETAG_TIMEOUT="5",
        HF_HUB_DISABLE_TELEMETRY="1",
    )
    code = (
        "import sys\nfrom tirl.models import ModelNotFoundError, resolve, load_tokenizer\n"
        f"try:\n    print(resolve({ref!r}))\n    print(load_tokenizer({ref!r}).name_or_path)\n"
        "except ModelNotFoundError as e:\n    print(e, file=sys.stderr)\n    sys.exit(3)\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)


def populate_cache(cache: Path, repo: str, model_dir: Path) -> Path:
    """An HF cache holding ``repo`` at COMMIT (refs/main -> snapshots/COMMIT), as ``hf download`` leaves it."""
    base = cache / ("models--" + repo.replace("/", "--"))
    snap = base / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    for f in model_dir.iterdir():
        if f.is_file():
            shutil.copy2(f, snap / f.name)
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(COMMIT)
    return snap


def test_hub_ids_are_recognised_and_paths_are_not(tmp_path):
    assert HUB_ID.match("Qwen/Qwen2.5-0.5B-Instruct")
    assert HUB_ID.match("HuggingFaceTB/SmolLM2-135M-Instruct@main")
    for not_an_id in ("/abs/path", "a/b/c", "name-only", "org/name/"):
        assert not HUB_ID.match(not_an_id)
    assert _classify("Qwen/Qwen2.5-0.5B-Instruct") == ("hub", "Qwen/Qwen2.5-0.5B-Instruct")
    with pytest.raises(ModelNotFoundError, match="not a Hub id"):
        _classify(str(tmp_path / "missing" / "folder"))
    local = tmp_path / "org" / "name"  # a local folder shaped like an id wins over the hub
    local.mkdir(parents=True)
    (local / "config.json").write_text("{}")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert _classify("org/name")[0] == "folder"
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("offline", [False, True], ids=["unreachable-endpoint", "HF_HUB_OFFLINE"])
def test_uncached_hub_id_fails_with_one_line_naming_the_fix(tmp_path, offline):
    proc = run_resolve("Qwen/Qwen2.5-0.5B-Instruct", tmp_path / "hub", offline=offline)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert "Qwen/Qwen2.5-0.5B-Instruct" in line and "not in the HF cache" in line
    assert ("HF_HUB_OFFLINE is set" if offline else "is unreachable") in line
    assert "HF_HUB_OFFLINE=1" in line and "local model folder" in line


@pytest.mark.parametrize("offline", [False, True], ids=["unreachable-endpoint", "HF_HUB_OFFLINE"])
def test_cached_hub_id_resolves_to_its_snapshot(tmp_path, tiny_smollm2_model_dir, offline):
    cache = tmp_path / "hub"
    snap = populate_cache(cache, "tirl-test/tiny-smollm2", tiny_smollm2_model_dir)
    proc = run_resolve("tirl-test/tiny-smollm2", cache, offline=offline)
    assert proc.returncode == 0, proc.stderr
    assert [Path(line) for line in proc.stdout.split()] == [snap, snap]  # the model and its tokenizer
