"""Configuration of GRPO-RoC training: dataclasses, YAML loading and ``key=value`` overrides.

Covers :class:`RLConfig` and its sections (model, data, rollout, RoC, optimisation, logging), loading a YAML
recipe (``configs/*.yaml``) with dotted overrides from the command line (``rollout.group_size=8``), type
checking against the dataclass fields (YAML 1.1 reads ``1e-6`` as a string; it is converted here), and the batch
arithmetic that maps an RL step onto TRL's ``GRPOConfig``. It does not build the trainer (:mod:`tirl.train.rl`).

Defaults are the report's (rStar2-Agent's training recipe, and the public release, github.com/microsoft/rStar at
ecbfb94): loss ``dapo`` (token-level mean), clip 0.2 / 0.28 (clip-higher), beta 0 (no KL, no reference model), no
entropy bonus, AdamW lr 1e-6 constant after 20 warm-up steps, weight decay 0.01, grad clip 1.0, temperature 1.0, 32
rollouts per problem of which RoC keeps 16, 512 problems per step, one optimiser step per RL step (on-policy).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tirl.algo.roc import RocConfig
from tirl.protocol.config import ProtocolConfig
from tirl.rollout.agent_loop import AgentLoopSettings
from tirl.train.watchdog import WatchdogConfig


@dataclass
class LoraSettings:
    """LoRA through peft (off by default; used for the CPU runs of real models).

    Attributes:
        enabled: train a LoRA adapter instead of all weights.
        r: rank.
        alpha: scaling numerator (``lora_alpha``).
        dropout: dropout on the adapter input.
        target_modules: module names to adapt (the attention and MLP projections of Qwen2/Llama).
    """

    enabled: bool = False
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )


@dataclass
class ModelConfig:
    """The policy.

    Attributes:
        name_or_path: a built-in name of ``tirl.models`` (``qwen2.5-coder-0.5b-instruct``,
            ``smollm2-135m-instruct``), a local Hugging Face folder, or a GGUF file.
        dtype: ``auto`` (bf16 on GPUs and on CPUs that compute bf16 natively, else float32; see
            :func:`tirl.models.loading.resolve_dtype`), ``float32``, ``bfloat16`` or ``float16``.
        gradient_checkpointing: recompute activations in the backward pass (saves memory on long sequences).
        lora: LoRA settings.
        init_token_rows: tokens (each one vocabulary entry) whose never-trained embedding rows are set to the
            mean of the rows of their spelling when the model is loaded (:mod:`tirl.models.token_rows`); the SFT
            recipe for Qwen2.5-Coder-0.5B names ``<tool_call>`` and ``</tool_call>``.
        train_token_rows: tokens whose input-embedding and LM-head rows are trained in full next to a LoRA
            adapter (:mod:`tirl.train.token_rows`; SFT stage only, an RL recipe that sets it is rejected).
    """

    name_or_path: str = "qwen2.5-coder-0.5b-instruct"
    dtype: str = "auto"
    gradient_checkpointing: bool = False
    lora: LoraSettings = field(default_factory=LoraSettings)
    init_token_rows: list[str] = field(default_factory=list)
    train_token_rows: list[str] = field(default_factory=list)


@dataclass
class DataConfig:
    """Training problems (:func:`tirl.data.training.load_training_problems`).

    Attributes:
        sources: packaged sets (``gsm8k``, ``math``, ``aime``, ``champ``, ``curated``, optionally ``name:N``),
            ``synthetic:N``, or JSONL paths (the stage-3 hard subset written by ``tirl data filter-hard``).
        limit: cap on the number of problems after shuffling (None = all).
        seed: shuffling and synthetic seed.
    """

    sources: list[str] = field(default_factory=lambda: ["math", "aime", "champ"])
    limit: int | None = None
    seed: int = 0


@dataclass
class RolloutConfig(AgentLoopSettings):
    """Multi-turn rollout during training: the agent-loop settings (:class:`AgentLoopSettings`, the same fields
    under the same names as everywhere else) with the report's training defaults, and the RL-only settings.

    Attributes:
        max_turns: assistant-turn limit (stage 1/2: 10, stage 3: 15).
        max_response_tokens: response budget, model and tool tokens together (8K, 12K, 12K).
        temperature: sampling temperature (1.0 in training).
        top_p, context_window, tool_timeout_s, tool_memory_mb, max_concurrency: as in :class:`AgentLoopSettings`
            (``context_window`` None: the model's ``max_position_embeddings``; ``max_concurrency`` None: all
            trajectories of a step).
        group_size: G, trajectories per problem kept for the update (TRL's ``num_generations``).
        oversample: sampled per problem = ``oversample * group_size`` (2 in the report: 2G = 32 sampled).
            With ``roc.enabled = False`` only G are sampled.
        max_prompt_tokens: problems whose rendered prompt is longer are skipped at load time.
        sandbox: ``local`` (a ``LocalSandbox`` pool in this process) or the URL of a code-execution service.
        sandbox_workers: worker processes of the local pool.
        engine_batch_size: largest batch of concurrent generation calls the in-process engine runs at once.
        server_url: generate through an inference server (vLLM or its CPU build, started on
            ``model.name_or_path`` with ``--enable-lora``) that is sent the policy's LoRA adapter before every
            rollout (:mod:`tirl.train.server_policy`); None: the in-process engine (or TRL's vLLM).
        server_lora_name: the adapter's name on that server.
        use_vllm: generate through TRL's vLLM integration instead of in-process transformers (GPU).
        vllm_mode: ``colocate`` or ``server`` (TRL's modes).
        vllm_server_base_url: for ``server`` mode.
        vllm_gpu_memory_utilization: for ``colocate`` mode.
        vllm_tensor_parallel_size: for ``colocate`` mode.
    """

    max_turns: int = 10
    max_response_tokens: int = 8192
    temperature: float = 1.0
    group_size: int = 16
    oversample: int = 2
    max_prompt_tokens: int = 2048
    sandbox: str = "local"
    sandbox_workers: int = 4
    engine_batch_size: int = 32
    server_url: str | None = None
    server_lora_name: str = "policy"
    use_vllm: bool = False
    vllm_mode: str = "colocate"
    vllm_server_base_url: str | None = None
    vllm_gpu_memory_utilization: float = 0.5
    vllm_tensor_parallel_size: int = 1

    @property
    def samples_per_problem(self) -> int:
        """Trajectories sampled per problem before RoC selection."""
        return self.group_size * self.oversample


@dataclass
class OptimConfig:
    """Loss and optimiser (TRL ``GRPOConfig`` fields of the same meaning).

    Attributes:
        loss_type: TRL loss aggregation; ``dapo`` = token-level mean over the whole step (report).
        epsilon: lower clip (1 - epsilon).
        epsilon_high: upper clip (1 + epsilon_high), clip-higher.
        beta: KL coefficient; 0 = no reference model.
        entropy_coef: entropy bonus; 0 in the report.
        learning_rate: AdamW learning rate.
        warmup_steps: linear warm-up steps, then constant.
        lr_scheduler_type: a transformers scheduler name (``constant_with_warmup``).
        weight_decay: AdamW weight decay.
        max_grad_norm: gradient clipping.
        per_device_train_batch_size: trajectories per forward/backward micro-batch on one process.
        std_floor: floor on the group reward std in the advantage (:mod:`tirl.algo.advantages`).
        adv_eps: epsilon added to the std.
        retain_high_entropy_token_ratio: keep only this fraction of generated tokens, the highest-entropy
            ones, in the policy loss (the release's option of the same name; 1.0 = off, the default; the
            report trains with all tokens). Injected tool tokens never enter. See
            :mod:`tirl.algo.entropy_mask`.
        entropy_mask_scope: how tokens are ranked for that mask: ``sequence`` (top fraction of each
            sequence, as the release does) or ``batch`` (TRL's ``top_entropy_quantile``: one threshold over
            all completion tokens of the step, gathered over processes).
    """

    loss_type: str = "dapo"
    epsilon: float = 0.2
    epsilon_high: float = 0.28
    beta: float = 0.0
    entropy_coef: float = 0.0
    learning_rate: float = 1e-6
    warmup_steps: int = 20
    lr_scheduler_type: str = "constant_with_warmup"
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    per_device_train_batch_size: int = 4
    std_floor: float = 1e-2
    adv_eps: float = 1e-6
    retain_high_entropy_token_ratio: float = 1.0
    entropy_mask_scope: str = "sequence"


@dataclass
class LoggingConfig:
    """Where metrics go.

    Attributes:
        jsonl: write ``metrics.jsonl`` in the output folder (always recommended; ``tirl plot`` reads it).
        report_to: extra transformers integrations: ``tensorboard``, ``wandb`` (each needs its package).
        console: print a per-step line with rich.
        log_trajectories: write the kept trajectories of each step to ``trajectories/step_N.jsonl``.
    """

    jsonl: bool = True
    report_to: list[str] = field(default_factory=list)
    console: bool = True
    log_trajectories: bool = False


@dataclass
class RLConfig:
    """One RL stage.

    Attributes:
        stage: a name for this stage (``stage1``...), recorded in the metrics.
        output_dir: checkpoints, metrics and the final model go here.
        max_steps: RL steps of this stage (one optimiser step each).
        problems_per_step: unique problems per RL step over all processes (512 in the report).
        save_steps: checkpoint every this many steps.
        save_total_limit: keep at most this many checkpoints (None = all).
        resume: continue from the newest checkpoint in ``output_dir`` when there is one (weights, optimiser,
            scheduler, RNG, data position).
        init_from: start this stage from a checkpoint of a previous stage (a ``checkpoint-N`` folder or a final
            model folder): weights only, fresh optimiser and scheduler. Ignored when resuming.
        seed: global seed.
        bf16: mixed precision on GPUs (CPU runs use ``model.dtype``).
        model, data, rollout, roc, optim, logging: the sections.
        protocol: the conversation format (:class:`tirl.protocol.ProtocolConfig`) of the rollouts; the SFT
            stage and evaluation of the same policy should use the same one.
        watchdog: when an unattended run warns and stops (:mod:`tirl.train.watchdog`).
    """

    stage: str = "stage1"
    output_dir: str = "runs/rl"
    max_steps: int = 100
    problems_per_step: int = 512
    save_steps: int = 10
    save_total_limit: int | None = None
    resume: bool = True
    init_from: str | None = None
    seed: int = 0
    bf16: bool = False
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    roc: RocConfig = field(default_factory=RocConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)
    watchdog: WatchdogConfig = field(default_factory=WatchdogConfig)

    def validate(self, num_processes: int = 1) -> None:
        """Check the configuration and the batch arithmetic for ``num_processes`` training processes.

        Groups must never span processes: RoC and the group advantage need all of a problem's trajectories
        in one process (see :mod:`tirl.train.rollout`), so ``problems_per_step`` must be a multiple of the
        number of processes, and each process's trajectories a multiple of the micro-batch size.

        Raises:
            ValueError: with the offending field(s) named.
        """
        r, o = self.rollout, self.optim
        if self.model.train_token_rows:
            raise ValueError("model.train_token_rows is supported by the SFT stage (tirl train sft) only")
        if r.group_size < 2:
            raise ValueError("rollout.group_size must be >= 2 (GRPO needs a group)")
        if r.oversample < 1:
            raise ValueError("rollout.oversample must be >= 1")
        if self.roc.enabled and r.oversample < 2:
            raise ValueError("roc.enabled needs rollout.oversample >= 2 (RoC keeps G of oversample * G)")
        self.roc.validate(r.group_size)
        self.watchdog.validate()
        if r.context_window is not None and r.context_window < 2:
            raise ValueError("rollout.context_window must be >= 2 or null")
        if self.max_steps < 1 or self.problems_per_step < 1 or self.save_steps < 1:
            raise ValueError("max_steps, problems_per_step and save_steps must be >= 1")
        if self.problems_per_step % num_processes:
            raise ValueError(
                f"problems_per_step={self.problems_per_step} must be a multiple of the {num_processes} processes"
            )
        per_process = self.problems_per_step // num_processes * r.group_size
        if per_process % o.per_device_train_batch_size:
            raise ValueError(
                f"each process trains on {per_process} trajectories per step (problems_per_step / processes * "
                f"group_size), which must be a multiple of optim.per_device_train_batch_size="
                f"{o.per_device_train_batch_size}"
            )
        if o.loss_type not in ("dapo", "grpo", "dr_grpo", "bnpo"):
            raise ValueError(f"optim.loss_type {o.loss_type!r} is not supported (dapo, grpo, dr_grpo, bnpo)")
        if not 0.0 < o.retain_high_entropy_token_ratio <= 1.0:
            raise ValueError("optim.retain_high_entropy_token_ratio must be in (0, 1] (1.0 = all tokens)")
        if o.entropy_mask_scope not in ("sequence", "batch"):
            raise ValueError(f"optim.entropy_mask_scope must be sequence or batch, got {o.entropy_mask_scope!r}")
        if self.model.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ValueError(f"model.dtype must be auto, float32, bfloat16 or float16, got {self.model.dtype!r}")
        if r.server_url and (r.use_vllm or not self.model.lora.enabled):
            raise ValueError("rollout.server_url needs model.lora.enabled (the adapter is what is sent to the "
                             "server) and cannot be combined with rollout.use_vllm")
        if r.vllm_mode not in ("colocate", "server"):
            raise ValueError(f"rollout.vllm_mode must be colocate or server, got {r.vllm_mode!r}")

    def steps_per_generation(self, num_processes: int = 1) -> int:
        """Micro-batches per RL step on each process (= gradient accumulation steps: one optimiser step)."""
        per_process = self.problems_per_step // num_processes * self.rollout.group_size
        return per_process // self.optim.per_device_train_batch_size

    def to_dict(self) -> dict[str, Any]:
        """A plain nested dict (YAML/JSON-serialisable; tuples become lists)."""
        return dataclasses.asdict(self, dict_factory=plain_dict)


# --------------------------------------------------------------------------------------------------------------
# loading


def plain_dict(items: list[tuple[str, Any]]) -> dict[str, Any]:
    """``dataclasses.asdict`` factory that writes tuples as lists (``yaml.safe_dump`` refuses tuples)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in items}


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Convert ``value`` to type ``tp`` (a dataclass, list[...], X | None, bool/int/float/str)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null", "~")):
            if type(None) in typing.get_args(tp):
                return None
        errors = []
        for a in args:
            try:
                return _coerce(value, a, where)
            except (TypeError, ValueError) as exc:
                errors.append(str(exc))
        raise ValueError(f"{where}: cannot read {value!r} as {tp}: {'; '.join(errors)}")
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected a mapping, got {value!r}")
        return _build(tp, value, where)
    if origin is typing.Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ValueError(f"{where}: expected one of {', '.join(map(repr, allowed))}, got {value!r}")
        return value
    if origin is tuple:
        args = typing.get_args(tp)
        item_tp = args[0] if args else Any
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{where}: expected a list, got {value!r}")
        return tuple(_coerce(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is list:
        (item_tp,) = typing.get_args(tp) or (Any,)
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{where}: expected a list, got {value!r}")
        return [_coerce(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value)]
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "yes", "on", "1", "false", "no", "off", "0"):
            return value.lower() in ("true", "yes", "on", "1")
        raise ValueError(f"{where}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ValueError(f"{where}: expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        raise ValueError(f"{where}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, bool):
            raise ValueError(f"{where}: expected a number, got {value!r}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: expected a number, got {value!r}") from None
    if tp is str:
        if isinstance(value, (dict, list)):
            raise ValueError(f"{where}: expected a string, got {value!r}")
        return str(value)
    return value


def _build(cls: type, data: dict[str, Any], where: str = "") -> Any:
    hints = _field_types(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(
            f"unknown key(s) {', '.join((where + '.' if where else '') + k for k in unknown)}; "
            f"known: {', '.join(sorted(names))}"
        )
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}" if where else k) for k, v in data.items()}
    return cls(**kwargs)


def parse_overrides(overrides: Sequence[str]) -> dict[str, Any]:
    """``["a.b=1", "c=x,y"]`` -> nested ``{"a": {"b": 1}, "c": "x,y"}`` (values parsed as YAML scalars).

    Raises:
        ValueError: an item without ``=`` or with an empty key.
    """
    nested: dict[str, Any] = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            raise ValueError(f"override {item!r} is not of the form key.sub=value")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        node = nested
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(f"override {item!r} conflicts with an earlier override of {part!r}")
            node = child
        node[parts[-1]] = value
    return nested


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> RLConfig:
    """Read an :class:`RLConfig` from a YAML file (or the defaults when ``path`` is None) plus overrides.

    Args:
        path: a YAML mapping with the sections of :class:`RLConfig` (missing keys keep their defaults).
        overrides: ``key.sub=value`` strings applied on top, in order.

    Returns:
        The configuration (not yet validated against a process count: call :meth:`RLConfig.validate`).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: invalid YAML, an unknown key (the message lists the known ones), or a value of the wrong
            type.
    """
    return load_dataclass_config(RLConfig, path, overrides)


def load_dataclass_config(cls: type, path: str | Path | None = None, overrides: Sequence[str] = ()) -> Any:
    """Read any configuration dataclass ``cls`` (:class:`RLConfig`, ``tirl.train.sft_config.SFTConfig``) from a
    YAML file plus ``key.sub=value`` overrides, with the type checks and errors of :func:`load_config`."""
    data: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"no config file at {path}")
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: invalid YAML: {exc}") from exc
        if loaded is not None and not isinstance(loaded, dict):
            raise ValueError(f"{path}: the top level must be a mapping")
        data = loaded or {}
    data = _merge(data, parse_overrides(overrides))
    return _build(cls, data)


def dump_config(config: Any, path: str | Path) -> None:
    """Write ``config`` as YAML (what the run used; read back by :func:`load_config`)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(yaml.safe_dump(config.to_dict(), sort_keys=False), encoding="utf-8")


__all__ = [
    "DataConfig",
    "LoggingConfig",
    "LoraSettings",
    "ModelConfig",
    "OptimConfig",
    "RLConfig",
    "RolloutConfig",
    "dump_config",
    "load_config",
    "load_dataclass_config",
    "parse_overrides",
]
