"""RL configuration: YAML + overrides, type coercion, clear errors, batch arithmetic, the shipped recipes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tirl.train.config import RLConfig, dump_config, load_config, parse_overrides

CONFIGS = Path(__file__).resolve().parent.parent / "configs" / "rl"


def test_defaults_are_the_reports():
    c = RLConfig()
    assert (c.optim.loss_type, c.optim.epsilon, c.optim.epsilon_high, c.optim.beta) == ("dapo", 0.2, 0.28, 0.0)
    assert (c.optim.learning_rate, c.optim.warmup_steps, c.optim.lr_scheduler_type) == (
        1e-6,
        20,
        "constant_with_warmup",
    )
    assert c.optim.entropy_coef == 0.0
    assert (c.rollout.group_size, c.rollout.samples_per_problem, c.rollout.temperature) == (16, 32, 1.0)
    assert c.problems_per_step == 512


def test_yaml_and_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("optim:\n  learning_rate: 1e-6\nrollout:\n  group_size: 8\n")
    c = load_config(
        path,
        [
            "rollout.group_size=4",
            "data.sources=gsm8k,synthetic:10",
            "init_from=null",
            "roc.drop_all_equal=true",
            "optim.warmup_steps=0",
        ],
    )
    assert c.optim.learning_rate == 1e-6 and isinstance(c.optim.learning_rate, float)  # YAML 1.1 reads a str
    assert c.rollout.group_size == 4
    assert c.data.sources == ["gsm8k", "synthetic:10"]
    assert c.init_from is None and c.roc.drop_all_equal is True and c.optim.warmup_steps == 0


@pytest.mark.parametrize(
    "override,match",
    [
        ("rollout.groupsize=4", "unknown key"),
        ("rollout.group_size=four", "integer"),
        ("roc.enabled=maybe", "true/false"),
        ("optim.learning_rate=fast", "number"),
        ("rollout=3", "mapping"),
        ("nonsense", "key.sub=value"),
    ],
)
def test_bad_overrides_raise_clear_errors(override, match):
    with pytest.raises(ValueError, match=match):
        load_config(None, [override])


def test_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(ValueError, match="mapping"):
        load_config(bad)
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [\n")
    with pytest.raises(ValueError, match="invalid YAML"):
        load_config(broken)


def test_parse_overrides_nests():
    assert parse_overrides(["a.b=1", "a.c=x", "d=[1, 2]"]) == {"a": {"b": 1, "c": "x"}, "d": [1, 2]}


def test_dump_round_trip(tmp_path):
    c = load_config(None, ["rollout.group_size=4", "stage=s9"])
    dump_config(c, tmp_path / "out.yaml")
    assert load_config(tmp_path / "out.yaml") == c


def test_groups_never_span_processes():
    c = load_config(None, ["problems_per_step=6", "rollout.group_size=4", "optim.per_device_train_batch_size=4"])
    c.validate(2)
    assert c.steps_per_generation(2) == 3  # 3 problems x 4 per process, micro-batches of 4
    with pytest.raises(ValueError, match="multiple of the 4 processes"):
        c.validate(4)
    with pytest.raises(ValueError, match="per_device_train_batch_size"):
        load_config(
            None,
            [
                "problems_per_step=1",
                "rollout.group_size=2",
                "roc.min_per_class=1",
                "optim.per_device_train_batch_size=4",
            ],
        ).validate(1)


@pytest.mark.parametrize(
    "override,match",
    [
        ("rollout.group_size=1", "group_size"),
        ("rollout.oversample=1", "oversample"),
        ("roc.mode=best", "mode"),
        ("roc.min_per_class=9", "min_per_class"),
        ("optim.loss_type=ppo", "loss_type"),
        ("model.dtype=int8", "dtype"),
    ],
)
def test_validate_rejects(override, match):
    with pytest.raises(ValueError, match=match):
        load_config(None, [override]).validate(1)


@pytest.mark.parametrize(
    "name,processes",
    [
        ("rstar2-stage1", 64),
        ("rstar2-stage2", 64),
        ("rstar2-stage3", 64),
        ("cpu-tiny-smoke", 1),
        ("cpu-smollm2-synthetic", 1),
        ("cpu-qwen0.5b-synthetic", 1),
        ("cpu-toolmath-roc", 1),
        ("cpu-toolmath-grpo", 1),
        ("cpu-toolmath-async", 1),
        ("cpu-smollm2-fsdp", 2),
        ("cpu-smollm2-fsdp", 1),
    ],
)
def test_shipped_recipes_load_and_validate(name, processes):
    c = load_config(CONFIGS / f"{name}.yaml")
    c.validate(processes)


def test_stage_2_and_3_state_only_what_differs_from_the_stage_before():
    """stage 2 and 3 extend the previous stage (``base:``); loaded, they are the full recipes they replaced: the
    previous stage with exactly these keys changed."""
    import yaml

    s1, s2, s3 = (load_config(CONFIGS / f"rstar2-stage{i}.yaml") for i in (1, 2, 3))
    assert s2 == load_config(
        CONFIGS / "rstar2-stage1.yaml",
        [
            "stage=stage2",
            "output_dir=runs/stage2",
            "init_from=auto:runs/stage1",
            "max_steps=85",
            "data.seed=1",
            "rollout.max_response_tokens=12288",
        ],
    )
    assert s3 == load_config(
        CONFIGS / "rstar2-stage2.yaml",
        [
            "stage=stage3",
            "output_dir=runs/stage3",
            "init_from=auto:runs/stage2",
            "max_steps=125",
            "data.seed=2",
            "data.sources=runs/stage3_hard.jsonl",
            "rollout.max_turns=15",
        ],
    )
    assert s1.optim == s2.optim == s3.optim and s1.roc == s3.roc and s1.model == s3.model
    for i, base in ((2, "rstar2-stage1.yaml"), (3, "rstar2-stage2.yaml")):
        raw = yaml.safe_load((CONFIGS / f"rstar2-stage{i}.yaml").read_text())
        assert raw["base"] == base and "optim" not in raw and "model" not in raw


# cpu-toolmath-grpo.yaml as it was before it extended cpu-toolmath-roc.yaml with ``base:``: every setting stated
# (its comments left out).
TOOLMATH_GRPO_FULL = """\
stage: cpu-toolmath-grpo
output_dir: runs/cpu-toolmath-grpo
max_steps: 40
problems_per_step: 4
save_steps: 1
model:
  name_or_path: qwen2.5-coder-0.5b-tirl-sft
  dtype: auto
  lora:
    enabled: true
    r: 8
    alpha: 16
data:
  sources: [toolmath:3000, gsm8k:600]
  seed: 0
rollout:
  group_size: 4
  oversample: 2
  max_turns: 3
  max_response_tokens: 384
  max_prompt_tokens: 384
  context_window: 768
  temperature: 1.0
  tool_timeout_s: 5.0
  sandbox: local
  sandbox_workers: 2
  engine_batch_size: 32
  launch_server: auto
  launch_server_args: [--enforce-eager]
roc:
  enabled: false
  min_per_class: 1
optim:
  learning_rate: 3.0e-5
  warmup_steps: 0
  per_device_train_batch_size: 4
logging:
  log_trajectories: true
protocol:
  prompt_style: compact
"""


def test_toolmath_grpo_states_only_what_differs_from_roc(tmp_path):
    """cpu-toolmath-grpo.yaml extends cpu-toolmath-roc.yaml (``base:``); loaded, it is the full recipe it
    replaced, and the RoC recipe with exactly the ablation's keys changed."""
    import yaml

    full = tmp_path / "cpu-toolmath-grpo-full.yaml"
    full.write_text(TOOLMATH_GRPO_FULL)
    grpo = load_config(CONFIGS / "cpu-toolmath-grpo.yaml")
    assert grpo == load_config(full)
    assert grpo == load_config(
        CONFIGS / "cpu-toolmath-roc.yaml",
        ["stage=cpu-toolmath-grpo", "output_dir=runs/cpu-toolmath-grpo", "max_steps=40", "roc.enabled=false"],
    )
    raw = yaml.safe_load((CONFIGS / "cpu-toolmath-grpo.yaml").read_text())
    assert raw["base"] == "cpu-toolmath-roc.yaml" and set(raw) == {"base", "stage", "output_dir", "max_steps", "roc"}


def test_the_async_toolmath_recipe_is_the_roc_recipe_at_max_staleness_1_on_its_own_server():
    overrides = ["stage=cpu-toolmath-async", "output_dir=runs/cpu-toolmath-async"]
    overrides += ["rollout.max_staleness=1", "rollout.launch_server=true"]
    asynchronous = load_config(CONFIGS / "cpu-toolmath-async.yaml")
    assert asynchronous == load_config(CONFIGS / "cpu-toolmath-roc.yaml", overrides)
    assert asynchronous.rollout.temperature == 1.0 and asynchronous.rollout.top_p == 1.0
    import yaml

    raw = yaml.safe_load((CONFIGS / "cpu-toolmath-async.yaml").read_text())
    assert set(raw) == {"base", "stage", "output_dir", "rollout"}


def test_a_config_file_extends_its_base_section_by_section(tmp_path):
    from tirl.config import read_yaml_mapping

    (tmp_path / "sub").mkdir()
    (tmp_path / "a.yaml").write_text(
        "stage: a\nmax_steps: 5\nrollout: {group_size: 4, max_turns: 3}\ndata: {sources: [x, y]}\n"
    )
    (tmp_path / "sub" / "b.yaml").write_text(
        "base: ../a.yaml\nstage: b\nrollout: {max_turns: 7}\ndata: {sources: [z]}\n"
    )
    assert read_yaml_mapping(tmp_path / "sub" / "b.yaml") == {
        "stage": "b",
        "max_steps": 5,
        "rollout": {"group_size": 4, "max_turns": 7},
        "data": {"sources": ["z"]},
    }
    c = load_config(tmp_path / "sub" / "b.yaml", ["rollout.group_size=2"])
    assert (c.stage, c.max_steps, c.rollout.group_size, c.rollout.max_turns) == ("b", 5, 2, 7)
    (tmp_path / "a.yaml").write_text("base: sub/b.yaml\n")
    with pytest.raises(ValueError, match="cycle"):
        read_yaml_mapping(tmp_path / "sub" / "b.yaml")
    (tmp_path / "c.yaml").write_text("base: missing.yaml\n")
    with pytest.raises(FileNotFoundError):
        read_yaml_mapping(tmp_path / "c.yaml")


def test_stage_recipes_follow_the_report():
    s1, s2, s3 = (load_config(CONFIGS / f"rstar2-stage{i}.yaml") for i in (1, 2, 3))
    assert [s.rollout.max_response_tokens for s in (s1, s2, s3)] == [8192, 12288, 12288]
    assert [s.rollout.max_turns for s in (s1, s2, s3)] == [10, 10, 15]
    assert [s.max_steps for s in (s1, s2, s3)] == [300, 85, 125]
    assert s2.init_from == "auto:runs/stage1" and s3.init_from == "auto:runs/stage2"
    assert all(s.problems_per_step == 512 and s.rollout.samples_per_problem == 32 for s in (s1, s2, s3))


def test_a_protocol_setting_in_an_rl_recipe_reaches_the_agent_loop(tmp_path):
    from tirl.protocol import ProtocolConfig
    from tirl.train.config import load_config
    from tirl.train.rollout_func import AgentLoopSource

    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "protocol:\n  prompt_style: compact\n  function_aliases: [python_code_with_standard_io]\n"
        "rollout:\n  context_window: 900\n"
    )
    config = load_config(recipe, ["protocol.lenient=true"])
    loop_cfg = AgentLoopSource(config, tokenizer=None)._agent_config()
    assert loop_cfg.protocol == ProtocolConfig(
        prompt_style="compact", lenient=True, function_aliases=("python_code_with_standard_io",)
    )
    assert loop_cfg.context_window == 900


def test_protocol_settings_are_type_checked():
    import pytest

    from tirl.train.config import load_config

    with pytest.raises(ValueError, match="prompt_style"):
        load_config(None, ["protocol.prompt_style=huge"])


def test_a_resolved_config_with_a_protocol_round_trips_through_yaml(tmp_path):
    from tirl.train.config import dump_config, load_config

    config = load_config(None, ["protocol.prompt_style=compact", "protocol.box_commands=boxed"])
    dump_config(config, tmp_path / "c.yaml")
    again = load_config(tmp_path / "c.yaml")
    assert again.protocol == config.protocol and again.protocol.box_commands == ("boxed",)


def test_the_sft_recipe_and_the_cpu_rl_recipe_share_one_protocol():
    from pathlib import Path

    from tirl.train.config import load_config
    from tirl.train.sft_config import load_sft_config

    root = Path(__file__).resolve().parent.parent / "configs"
    sft = load_sft_config(root / "sft" / "cpu-qwen0.5b.yaml")
    rl = load_config(root / "rl" / "cpu-toolmath-roc.yaml")
    assert sft.protocol == rl.protocol
    assert rl.protocol.prompt_style == "compact"


def test_the_importance_sampling_correction_setting_reaches_trls_config():
    """``rollout.vllm_importance_sampling_correction`` is TRL's switch with use_vllm (TRL's default, on, unless
    a recipe says otherwise); the CPU colocated recipe turns it off (its extra forward pass is a no-op there)."""
    from tirl.train.rl import grpo_args

    root = Path(__file__).resolve().parents[1] / "configs" / "rl"
    default = load_config(root / "cpu-toolmath-roc.yaml", ["rollout.use_vllm=true", "rollout.vllm_mode=colocate"])
    assert grpo_args(default).vllm_importance_sampling_correction is True
    colocate = load_config(root / "cpu-toolmath-colocate.yaml")
    assert colocate.rollout.vllm_importance_sampling_correction is False
    assert grpo_args(colocate).vllm_importance_sampling_correction is False
