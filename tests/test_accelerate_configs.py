"""Every ``accelerate launch`` line in a recipe, a doc or the README names a config file that exists, and every
config in configs/accelerate/ is a mapping accelerate can read (distributed type, process count)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIG_FILE = re.compile(r"--config_file[ =](\S+)")
LAUNCH = re.compile(r"accelerate launch\s+-")  # a command line, not a mention in prose


def launch_lines() -> list[tuple[Path, str]]:
    files = [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "configs").rglob("*.yaml")),
        *sorted((ROOT / "benchmarks").glob("*.sh")),
        ROOT / "Makefile",
    ]
    out = []
    for f in files:
        if f.is_file():
            out += [(f, line) for line in f.read_text().splitlines() if LAUNCH.search(line)]
    return out


def test_every_launch_line_names_an_existing_config_file():
    lines = launch_lines()
    assert len(lines) >= 4  # the stage recipes, training.md and scale.md have them
    for f, line in lines:
        names = CONFIG_FILE.findall(line)
        if not names:  # a launch line without --config_file uses flags only (docs/training.md's CPU example)
            assert "--num_processes" in line, f"{f.name}: {line.strip()}"
            continue
        for name in names:
            assert (ROOT / name).is_file(), f"{f.relative_to(ROOT)} names {name}, which does not exist"


def test_accelerate_configs_are_readable():
    configs = sorted((ROOT / "configs" / "accelerate").glob("*.yaml"))
    assert {c.name for c in configs} >= {
        "zero3-8x8.yaml",
        "ddp-2cpu.yaml",
        "fsdp2-8gpu.yaml",
        "fsdp2-2cpu.yaml",
        "zero3-2cpu.yaml",
    }
    for c in configs:
        data = yaml.safe_load(c.read_text())
        assert data["distributed_type"] in ("FSDP", "DEEPSPEED", "MULTI_GPU", "MULTI_CPU"), c.name
        assert int(data["num_processes"]) >= 2 and int(data["num_machines"]) >= 1
        if data["distributed_type"] == "FSDP":
            assert data["fsdp_config"]["fsdp_version"] == 2 and data["fsdp_config"]["fsdp_reshard_after_forward"]


def test_the_cpu_launch_line_of_training_md_states_what_ddp_2cpu_yaml_states():
    """docs/training.md shows the 2-process CPU launch with flags; tests/test_train_distributed.py runs it with
    configs/accelerate/ddp-2cpu.yaml: both must give the same launch."""
    line = next(text for f, text in launch_lines() if f.name == "training.md" and "--multi_gpu" in text)
    flags = line.split("accelerate launch", 1)[1].split()
    data = yaml.safe_load((ROOT / "configs" / "accelerate" / "ddp-2cpu.yaml").read_text())
    assert line.lstrip().startswith("ACCELERATE_USE_CPU=1")  # torchrun's ranks become CPU ranks on gloo
    assert data["distributed_type"] == "MULTI_GPU"  # what --multi_gpu selects
    assert int(flags[flags.index("--num_processes") + 1]) == int(data["num_processes"]) == 2
    assert "--cpu" not in flags and data["use_cpu"] is False  # --cpu / use_cpu select the 1-process launcher
    # the settings the flags leave to accelerate's defaults
    assert int(data["num_machines"]) == 1 and data["mixed_precision"] == "no"
    assert "--mixed_precision" not in flags and "--num_machines" not in flags
