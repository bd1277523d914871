"""Settings reach every part (issue 27, item 4): a recipe's or eval config's ``sandbox:`` and ``verifier:`` sections
reach the executor and the verifier the runtime builds (RL: :class:`tirl.train.rollout_func.AgentLoopSource`; eval:
:func:`tirl.eval.components.build_default_components`), ``key=value`` overrides and ``--print-config`` show them,
the moved keys (``rollout.sandbox``, ``rollout.sandbox_workers``, eval's ``sandbox: URL``) still read with a
one-line warning, a bad field name is a one-line error naming where the setting lives, and ``tirl data curate``
probes answers on the run's executor (an injected one, or the service ``--sandbox`` names), never on a second,
module-global pool."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import tirl.reward.verifier as reward_verifier
from tirl.cli.main import app
from tirl.eval.config import load_eval_config
from tirl.reward import PRELOAD_MODULES, VerifierConfig
from tirl.runtime import AgentRuntime, build_check_executor, build_executor
from tirl.sandbox import LocalSandbox
from tirl.service.client import SandboxClient
from tirl.service.config import ExecutorConfig
from tirl.train.config import load_config
from tirl.train.rollout_func import AgentLoopSource

SMOKE = Path(__file__).resolve().parents[1] / "configs" / "rl" / "cpu-tiny-smoke.yaml"

RECIPE = """\
sandbox:
  workers: 1
  max_memory_mb: 512
  nproc_limit: 99
  preload: [numpy]
verifier:
  timeout_s: 2.5
  chunk_size: 3
"""


def test_an_rl_recipes_sandbox_and_verifier_sections_reach_the_built_executor_and_verifier(tmp_path):
    (tmp_path / "r.yaml").write_text(RECIPE + "protocol: {answer_fallback: none}\n")
    config = load_config(tmp_path / "r.yaml", ["verifier.integer_fast_path=false", "sandbox.shm_mb=32"])
    source = AgentLoopSource(config, tokenizer=None)  # the default executor factory: build_executor(config.sandbox)
    try:
        tools = source.runtime.executor
        verifier = source.runtime.verifier
    finally:
        source.close()
    assert isinstance(tools, LocalSandbox)  # built, never started: no worker ran
    pool = tools.config
    assert (tools.workers, pool.max_memory_mb, pool.nproc_limit, pool.shm_mb) == (1, 512, 99, 32)
    assert tools.config.preload == ("numpy", *PRELOAD_MODULES)  # the verifier's modules are always added
    assert type(tools.config).__name__ == "SandboxConfig"  # the pool gets its own part of the section
    assert verifier.config == VerifierConfig(timeout_s=2.5, chunk_size=3, integer_fast_path=False)
    assert verifier.protocol_config.answer_fallback == "none"
    checks = verifier.executor  # the answer checks' own pool, with the recipe's limits
    assert isinstance(checks, LocalSandbox) and checks is not tools
    assert (checks.config.max_memory_mb, checks.config.nproc_limit) == (512, 99)


def test_a_service_backend_builds_a_client_with_the_recipes_client_section():
    config = load_config(
        None,
        [
            "sandbox.backend=http://127.0.0.1:9, http://127.0.0.1:10",
            "sandbox.client.batch_size=7",
            "sandbox.client.max_attempts=2",
            "sandbox.max_memory_mb=640",
        ],
    )
    runtime = AgentRuntime(sandbox=config.sandbox, verifier=config.verifier)
    try:
        client = runtime.executor
        checks = runtime.verifier.executor
    finally:
        runtime.close()
    assert isinstance(client, SandboxClient)
    assert client.urls == ["http://127.0.0.1:9", "http://127.0.0.1:10"]
    assert (client.config.batch_size, client.config.max_attempts) == (7, 2)
    # a service client's answer checks run on a local one-worker pool of the section's pool settings
    assert isinstance(checks, LocalSandbox) and checks.workers == 1 and checks.config.max_memory_mb == 640
    assert build_check_executor(client) is not checks  # without the section: a pool of the defaults
    assert build_check_executor(client).config.max_memory_mb != 640


def test_build_executor_takes_the_section_not_a_string():
    with pytest.raises(TypeError, match="ExecutorConfig"):
        build_executor("local")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sandbox.backend"):
        ExecutorConfig(backend="ftp://nowhere")


async def test_an_eval_configs_sandbox_and_verifier_sections_reach_the_built_components(tmp_path, monkeypatch):
    import tirl.eval.components
    import tirl.models

    (tmp_path / "e.yaml").write_text(
        RECIPE + "model: m\nbenchmarks: [toy]\nengine: openai\n"
        "servers: [http://127.0.0.1:9]\nprotocol: {answer_fallback: none}\n"
    )
    config = load_eval_config(tmp_path / "e.yaml", {"verifier": {"assume_positive": False}})
    # no model, no server: the tokenizer and the router are stand-ins; the executor and verifier are the real ones
    monkeypatch.setattr(tirl.models, "load_tokenizer", lambda name: object())
    monkeypatch.setattr(tirl.eval.components, "build_router", lambda config, loaded: (object(), None, None))
    from tirl.eval.components import build_default_components

    components = await build_default_components(config)
    try:
        executor = components.executor
        verifier = components.grader.verifier  # type: ignore[attr-defined]
    finally:
        await components.aclose()
    assert isinstance(executor, LocalSandbox)
    assert (executor.workers, executor.config.max_memory_mb, executor.config.nproc_limit) == (1, 512, 99)
    assert verifier.config == VerifierConfig(timeout_s=2.5, chunk_size=3, assume_positive=False)
    assert verifier.executor is executor and verifier.protocol_config.answer_fallback == "none"
    assert config.resume_settings()["verifier"]["timeout_s"] == 2.5  # a changed grader is another run's grades


def test_overrides_and_print_config_show_the_new_sections(tmp_path):
    overrides = ["sandbox.max_memory_mb=512", "verifier.timeout_s=3", "sandbox.client.senders=4"]
    res = CliRunner().invoke(app, ["train", "rl", "--config", str(SMOKE), "--print-config", *overrides])
    assert res.exit_code == 0, res.output
    printed = yaml.safe_load(res.output)
    assert printed["sandbox"]["max_memory_mb"] == 512 and printed["sandbox"]["workers"] == 2  # from the recipe
    assert printed["sandbox"]["client"]["senders"] == 4 and printed["verifier"]["timeout_s"] == 3.0
    assert "sandbox" not in printed["rollout"] and "sandbox_workers" not in printed["rollout"]
    # what --print-config writes reads back as the same configuration
    (tmp_path / "printed.yaml").write_text(res.output)
    assert load_config(tmp_path / "printed.yaml") == load_config(SMOKE, overrides)

    res = CliRunner().invoke(
        app, ["eval", "--model", "m", "--benchmarks", "toy", "--sandbox", "http://h:1", "--print-config"]
    )
    assert res.exit_code == 0, res.output
    printed = yaml.safe_load(res.output)
    assert printed["sandbox"]["backend"] == "http://h:1"
    assert printed["verifier"] == dataclasses.asdict(VerifierConfig())


def test_the_moved_rollout_keys_still_read_with_one_warning_naming_the_new_key(tmp_path, caplog):
    (tmp_path / "old.yaml").write_text("rollout:\n  sandbox: http://127.0.0.1:8000\n  sandbox_workers: 3\n")
    with caplog.at_level(logging.WARNING, logger="tirl.config"):
        config = load_config(tmp_path / "old.yaml")
    assert (config.sandbox.backend, config.sandbox.workers) == ("http://127.0.0.1:8000", 3)
    warnings = [r.getMessage() for r in caplog.records if r.name == "tirl.config"]
    assert warnings == [
        "rollout.sandbox is deprecated: read as sandbox.backend (write that instead)",
        "rollout.sandbox_workers is deprecated: read as sandbox.workers (write that instead)",
    ]
    assert load_config(None, ["rollout.sandbox=local", "sandbox.backend=local"]).sandbox.backend == "local"
    with pytest.raises(ValueError, match="rollout.sandbox is sandbox.backend now; both are given"):
        load_config(None, ["rollout.sandbox=http://a:1", "sandbox.backend=local"])

    (tmp_path / "old-eval.yaml").write_text("model: m\nbenchmarks: [toy]\nsandbox: http://127.0.0.1:8000\n")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tirl.config"):
        eval_config = load_eval_config(tmp_path / "old-eval.yaml")
    assert eval_config.sandbox.backend == "http://127.0.0.1:8000"
    assert [r.getMessage() for r in caplog.records if r.name == "tirl.config"] == [
        "sandbox is deprecated: read as sandbox.backend (write that instead)"
    ]


def test_a_bad_field_name_is_a_one_line_error_that_says_where_the_setting_lives():
    with pytest.raises(ValueError) as info:
        load_config(None, ["sandbox.memory_mb=512"])
    message = str(info.value)
    assert "\n" not in message and message.startswith("unknown key(s) sandbox.memory_mb")
    assert "rollout.tool_memory_mb" in message and "sandbox.max_memory_mb" in message
    with pytest.raises(ValueError, match=r"unknown key\(s\) verifier.timeout \(did you mean verifier.timeout_s\?\)"):
        load_config(None, ["verifier.timeout=5"])
    with pytest.raises(ValueError, match=r"sandbox.client.batch \(did you mean sandbox.client.batch_size\?\)"):
        load_eval_config(None, {"model": "m", "benchmarks": ["toy"], "sandbox": {"client": {"batch": 3}}})
    res = CliRunner().invoke(app, ["train", "rl", "--config", str(SMOKE), "--print-config", "sandbox.memory_mb=512"])
    assert res.exit_code == 2
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "sandbox.memory_mb" in lines[0], res.output


# ------------------------------------------------------------------------------------------------------------------
# tirl data curate: the answer probe runs on the run's executor


class CountingExecutor:
    """A real one-worker pool (the verifier's preload) that counts the requests it is given."""

    def __init__(self) -> None:
        self.inner = LocalSandbox(workers=1, preload=PRELOAD_MODULES)
        self.requests = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def run(self, request: Any) -> Any:
        self.requests += 1
        return await self.inner.run(request)

    async def run_batch(self, requests: Any) -> Any:
        return [await self.run(r) for r in requests]


def _fractions(tmp_path: Path) -> Path:
    rows = [
        {
            "id": "half",
            "problem": "What is one divided by two, as a fraction in lowest terms?",
            "answer": "\\frac{1}{2}",
        },
        {"id": "count", "problem": "How many legs do three spiders have together?", "answer": "24"},
    ]
    path = tmp_path / "fractions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.slow
def test_curate_probes_answers_on_the_runtime_executor_it_is_given(tmp_path):
    from tirl.data.curation import AnswerPolicy, CurationConfig, curate

    spy = CountingExecutor()
    runtime = AgentRuntime(lambda: spy)
    default_before = reward_verifier._default_executor
    try:
        result = curate(
            [str(_fractions(tmp_path))],
            tmp_path / "out",
            CurationConfig(answers=AnswerPolicy(accept="rational"), benchmarks=()),
            verify=runtime.verify_data,
        )
    finally:
        runtime.close()
    assert [p.id for p in result.kept] == ["half", "count"]  # the fraction passed the probe
    assert spy.requests >= 1  # the probe ran on the given executor (the integer needs none)
    assert reward_verifier._default_executor is default_before  # no module-global pool was started


@pytest.mark.slow
async def test_tirl_data_curate_probes_on_the_service_its_sandbox_flag_names(tmp_path):
    from test_service_support import serving
    from tirl.service.app import create_app

    spy = CountingExecutor()
    app_ = create_app(spy)
    default_before = reward_verifier._default_executor
    collection = _fractions(tmp_path)
    try:
        async with serving(app_) as url:
            args = [
                "data",
                "curate",
                str(collection),
                "--out-dir",
                str(tmp_path / "out"),
                "--accept",
                "rational",
                "--sandbox",
                url,
            ]
            res = await asyncio.to_thread(CliRunner().invoke, app, args)
    finally:
        await spy.inner.aclose()
    assert res.exit_code == 0, res.output
    assert spy.requests >= 1  # the probe went to the service --sandbox names
    assert reward_verifier._default_executor is default_before
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert (report["total_in"], report["kept"]) == (2, 2)  # the fraction passed the probe on the service


def test_tirl_data_curate_refuses_a_bad_sandbox_in_one_line(tmp_path):
    res = CliRunner().invoke(
        app,
        ["data", "curate", str(_fractions(tmp_path)), "--out-dir", str(tmp_path / "o"), "--sandbox", "ftp://nowhere"],
    )
    assert res.exit_code == 2 and "sandbox.backend must be 'local' or http(s)://" in res.output
