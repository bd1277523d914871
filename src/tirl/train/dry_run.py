"""``tirl train rl --dry-run``: check a recipe against this machine up to the point where the GPU is needed.

Covers :func:`dry_run`: everything a run reads or reaches before it loads the model's weights, checked in the
order a run meets it, so a recipe written for a GPU machine (``configs/rl/one-gpu-qwen1.5b.yaml``) can be
checked on a CPU: the recipe's values (already checked when read), the data sources (every file read, the rows
counted), the starting weights (``init_from``), the model's tokenizer and how many prompts fit
``rollout.max_prompt_tokens``, the logging integrations, the inference servers, the sandbox (started, and its
``print(6 * 7)`` health check run; a service URL that does not answer fails here, not after the model loaded),
and the output folder. What needs the GPU (the weights on the device, TRL's colocated vLLM, the first step) is
named, not run.

Not covered: memory (the weights and the KV cache are sized by arithmetic in the recipe's comments), several
processes (``accelerate launch``), the speed of anything.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import os
from pathlib import Path

from tirl.train.config import RLConfig


def _sandbox_line(config: RLConfig) -> str:
    """Start the recipe's code executor, run the start-up health check, close it; one line saying what ran.

    Raises:
        tirl.rollout.agent_loop.SandboxUnavailable: the executor does not answer ``print(6 * 7)`` with 42.
    """
    from tirl.rollout.agent_loop import check_executor
    from tirl.runtime import build_executor

    sandbox = config.sandbox

    async def check() -> None:
        executor = build_executor(sandbox)
        async with executor:  # LocalSandbox starts its workers, SandboxClient its session
            await check_executor(executor)

    asyncio.run(check())
    where = (
        f"a local pool of {sandbox.workers} workers" if sandbox.backend == "local" else f"the service {sandbox.backend}"
    )
    return f"sandbox: {where} answered print(6 * 7) with 42"


def _writable(folder: Path) -> bool:
    """Whether ``folder`` exists and is writable, or could be created (its nearest existing parent is)."""
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            return candidate.is_dir() and os.access(candidate, os.W_OK)
    return False


def dry_run(config: RLConfig) -> list[str]:
    """Check ``config`` on this machine without loading the model's weights (see the module docstring).

    Args:
        config: a recipe that passed its own validation (``tirl train rl`` checks it when read).

    Returns:
        One line per check that passed, then one naming what was not run (the parts that need the GPU or
        vLLM when this machine has neither).

    Raises:
        ValueError: no data, no prompt that fits ``rollout.max_prompt_tokens``, fewer problems than
            ``problems_per_step``, a logging integration or inference server that is missing, or an output
            folder that cannot be written.
        FileNotFoundError: a data file, the model or ``init_from`` names nothing.
        tirl.rollout.agent_loop.SandboxUnavailable: the sandbox failed its health check.
    """
    from tirl.data.training import filter_prompt_length
    from tirl.models import load_tokenizer
    from tirl.rollout.vllm_server import vllm_available
    from tirl.train.common import resolve_init_from
    from tirl.train.rl import preflight, read_training_problems

    lines = [f"recipe: {config.stage}, {config.max_steps} steps of {config.problems_per_step} problems"]
    problems = read_training_problems(config)
    if not problems:
        raise ValueError(f"data.sources {config.data.sources} gave no problems")
    lines.append(f"data: {len(problems)} problems from {', '.join(config.data.sources)}")
    if config.init_from:
        lines.append(f"init_from: {resolve_init_from(config.init_from)}")
    name = str(config.model.name_or_path)
    # a tiny:TOKENIZER test model has that tokenizer; building the random weights is not a dry run's business
    tokenizer = load_tokenizer(name.removeprefix("tiny:"))
    fitting = filter_prompt_length(problems, tokenizer, config.rollout.max_prompt_tokens, config.protocol)
    if len(fitting) < config.problems_per_step:
        raise ValueError(
            f"{len(fitting)} of {len(problems)} prompts fit rollout.max_prompt_tokens="
            f"{config.rollout.max_prompt_tokens}, fewer than problems_per_step={config.problems_per_step}"
        )
    lines.append(
        f"model: {config.model.name_or_path} (tokenizer loaded; {len(fitting)} of {len(problems)} prompts fit "
        f"rollout.max_prompt_tokens={config.rollout.max_prompt_tokens})"
    )
    # the logging integrations and the inference servers; vLLM only where it is installed (else named below)
    has_vllm = vllm_available()
    rollout = config.rollout if has_vllm else dataclasses.replace(config.rollout, use_vllm=False)
    preflight(dataclasses.replace(config, rollout=rollout))
    if config.rollout.server_urls:
        lines.append(f"inference servers: {', '.join(config.rollout.server_urls)} answer")
    lines.append(_sandbox_line(config))
    if not _writable(Path(config.output_dir)):
        raise ValueError(f"output_dir {config.output_dir} cannot be written")
    lines.append(f"output_dir: {config.output_dir} is writable")
    not_run = ["loading the weights", "the first step"]
    cuda = importlib.util.find_spec("torch") is not None and _cuda_available()
    if config.rollout.use_vllm and not has_vllm:
        not_run.insert(1, "TRL's colocated vLLM (not installed here)")
    if not cuda:
        lines.append(f"not run (no GPU here): {', '.join(not_run)}")
    else:
        lines.append(f"not run (a dry run): {', '.join(not_run)}")
    return lines


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())
