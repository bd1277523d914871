"""A GRPO-RoC run whose tool calls go to two ``tirl sandbox serve`` processes, one of which is killed and restarted
in the middle of a step (issue 28, item 2; recorded in docs/scale.md).

What runs: two sandbox services (``python -m tirl.cli.main sandbox serve --port P``) on 127.0.0.1, and the trainer
``tirl train rl`` builds (:func:`tirl.train.rl.build_trainer`) on toolmath problems with
``sandbox.backend: http://127.0.0.1:P1,http://127.0.0.1:P2`` (a ``SandboxClient`` balancing over both; answers are
verified there too). The policy is the tiny random model on the SmolLM2 tokenizer; since a random model never
writes a tool call, the first turn of every trajectory is scripted to one call whose program sleeps
``--call-sleep-s`` and prints the problem's reference answer (so calls are in flight when the service dies and
half the trajectories can be correct), every other second turn answers from the tool output, the rest is sampled
from the policy. In step ``--restart-step`` (1-based), ``--kill-after-s`` after the step's first tool turn, the
service that holds calls at that moment (the client sends a batch to one service) gets SIGKILL (its sandbox
workers die with it: parent-death signal), and is started again on the same port ``--down-s`` later.

Checks (exit status 1 when one fails): every step holds exactly problems_per_step x 2G sampled trajectories with
distinct (problem, sample) slots and one answered tool call each (none lost, none counted twice); the metrics of
the restart step report the calls that met the restart (``sandbox/failovers``, ``sandbox/resent``,
``sandbox/internal_retries``: moved to or re-sent after the restart and answered; ``tool_calls/internal``: answered
``internal``, the sandbox's failure, never the model's); the other steps report none; the killed service came
back on its port and answered ``/healthz`` (the report's ``restart``: victim URL, killed, restarted, the restart's
error).

Usage: python benchmarks/sandbox_restart_run.py --out DIR [--steps 10] [--restart-step 5] [--json FILE]
[--prompt-style compact]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    """One ``tirl sandbox serve`` process on a fixed port (started, killed with SIGKILL, started again)."""

    def __init__(self, port: int, log: Path, workers: int = 1) -> None:
        self.port, self.log, self.workers = port, log, workers
        self.proc: subprocess.Popen | None = None
        self.events: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 300.0) -> None:
        """Start the process and wait until it answers ``/healthz``."""
        self.launch()
        self.wait_healthy(timeout_s)

    def launch(self) -> None:
        """Start the process without waiting for it (:meth:`wait_healthy` waits): two services start side by side."""
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        with self.log.open("a") as fh:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tirl.cli.main",
                    "sandbox",
                    "serve",
                    "--port",
                    str(self.port),
                    "--workers",
                    str(self.workers),
                    "--preload",
                    "numpy,sympy,math_verify,tirl.reward.worker",
                ],
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    def wait_healthy(self, timeout_s: float = 300.0) -> None:
        """Wait until the launched process answers ``/healthz`` (RuntimeError if it exits or ``timeout_s`` passes)."""
        import httpx

        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sandbox service on {self.port} exited ({self.proc.returncode}); see {self.log}")
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                    self.events.append(f"{time.time():.3f} started pid {self.proc.pid} on {self.port}")
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"sandbox service on {self.port} not healthy after {timeout_s:.0f} s")

    def kill(self) -> None:
        assert self.proc is not None
        # the serve process; its sandbox workers (sessions of their own) die by their parent-death signal
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.events.append(f"{time.time():.3f} SIGKILL pid {self.proc.pid} on {self.port}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def tool_turn(answer: str, sleep_s: float) -> str:
    """A tool-call turn whose program sleeps ``sleep_s`` and prints ``answer`` (JSON-escaped into the call)."""
    code = json.dumps(f"import time\ntime.sleep({sleep_s})\nprint({answer!r})")[1:-1]
    return (
        "Let me compute it.\n<tool_call>\n"
        '{"name": "execute_python_code_with_standard_io", "arguments": {"code": "'
        + code
        + '", "input": ""}}\n</tool_call><|im_end|>'
    )


class RestartingEngine:
    """Scripted first turns (a tool call printing the reference answer), then answer / policy turns; in the
    restart step it schedules the kill and restart of service A just after the step's first tool turn."""

    def __init__(
        self,
        inner: Any,
        tokenizer: Any,
        answers: dict[str, str],
        args: argparse.Namespace,
        services: list[Service],
        step_of: Any,
        client: Any,
    ) -> None:
        self.inner, self.tok, self.answers, self.args, self.services = inner, tokenizer, answers, args, services
        self.client = client  # () -> the run's SandboxClient, to see which service holds calls
        self.step_of = step_of
        self.second_turns = 0
        self.restart_thread: threading.Thread | None = None
        # what the restart thread did: the victim's URL, killed, started again (answered /healthz), the error
        self.restart: dict[str, Any] = {"victim": None, "killed": False, "restarted": False, "error": None}
        self.stats = getattr(inner, "stats", None)

    def set_model(self, model: Any) -> None:
        self.inner.set_model(model)

    def _problem_answer(self, text: str) -> str:
        for marker, answer in self.answers.items():
            if marker in text:
                return answer
        return "0"

    def _restart(self) -> None:
        try:
            self._kill_and_restart()
        except BaseException as exc:  # noqa: BLE001 - a thread's exception is otherwise lost: the run reports it
            self.restart["error"] = f"{type(exc).__name__}: {exc}"

    def _kill_and_restart(self) -> None:
        # the client sends a batch of calls to one service: restart the one that holds calls now
        time.sleep(self.args.kill_after_s)
        victim = self.services[0]
        for _ in range(100):
            outstanding = {url: info["outstanding"] for url, info in self.client().stats().servers.items()}
            busy = [s for s in self.services if outstanding.get(s.url, 0) > 0]
            if busy:
                victim = busy[0]
                victim.events.append(f"{time.time():.3f} outstanding calls {outstanding}")
                break
            time.sleep(0.05)
        self.restart["victim"] = victim.url
        victim.kill()
        self.restart["killed"] = True
        time.sleep(self.args.down_s)
        victim.start()  # on the same port; returns once it answers /healthz
        self.restart["restarted"] = True

    async def generate(self, prompt_ids: list[int], params: Any) -> Any:
        from tirl.rollout.engine import GenerationOutput

        text = self.tok.decode(prompt_ids, skip_special_tokens=False)
        last_user = text.rsplit("<|im_start|>user", 1)[-1]
        if "<tool_response>" not in last_user:
            if self.step_of() == self.args.restart_step and self.restart_thread is None:
                self.restart_thread = threading.Thread(target=self._restart, name="restart-A", daemon=True)
                self.restart_thread.start()
            ids = self.tok.encode(
                tool_turn(self._problem_answer(text), self.args.call_sleep_s), add_special_tokens=False
            )
            return GenerationOutput(token_ids=ids, logprobs=[0.0] * len(ids))
        self.second_turns += 1
        if self.second_turns % 2:
            answer = last_user.split("<tool_response>", 1)[1].split("</tool_response>", 1)[0]
            answer = answer.strip().splitlines()[-1].strip() if answer.strip() else "0"
            reply = f"The tool says {answer}.</reason>\n<answer>\\boxed{{{answer}}}</answer><|im_end|>"
            ids = self.tok.encode(reply, add_special_tokens=False)
            return GenerationOutput(token_ids=ids, logprobs=[0.0] * len(ids))
        return await self.inner.generate(prompt_ids, params)

    async def aclose(self) -> None:
        await self.inner.aclose()


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the services, train, check, and return the report."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    a, b = Service(free_port(), out / "service_a.log"), Service(free_port(), out / "service_b.log")
    t0 = time.time()
    # both services start side by side, and beside this process's imports (each imports tirl and preloads its
    # modules); both answer before the trainer is built
    a.launch()
    b.launch()
    try:
        from transformers import TrainerCallback

        from tirl.data.training import load_training_problems
        from tirl.models import cached_tiny_model, load_tokenizer
        from tirl.reward.scorer import VerifierScorer
        from tirl.rollout.hf_engine import HFEngine, HFEngineConfig
        from tirl.train.config import load_config
        from tirl.train.rl import build_trainer
        from tirl.train.rollout_func import AgentLoopSource

        a.wait_healthy()
        b.wait_healthy()
    except BaseException:
        a.stop()
        b.stop()
        raise
    model_dir = cached_tiny_model("smollm2-135m-instruct")  # vocabulary 49,152: a cheap update on CPU
    pps, group = 2, 2
    problems = load_training_problems([f"toolmath:{pps * args.steps}"], seed=0)
    config = load_config(
        None,
        [
            f"output_dir={out / 'run'}",
            f"model.name_or_path={model_dir}",
            "model.dtype=float32",
            f"max_steps={args.steps}",
            f"problems_per_step={pps}",
            "save_steps=100000",
            "resume=false",
            f"rollout.group_size={group}",
            "rollout.oversample=2",
            "rollout.max_turns=2",
            "rollout.max_response_tokens=128",
            f"sandbox.backend={a.url},{b.url}",
            "rollout.tool_timeout_s=10",
            f"optim.per_device_train_batch_size={pps * group}",
            "optim.learning_rate=1e-4",
            "optim.warmup_steps=0",
            "roc.min_per_class=1",
            "logging.console=false",
            "logging.log_trajectories=true",
            "watchdog.enabled=false",
            f"protocol.prompt_style={args.prompt_style}",
        ],
    )
    tokenizer = load_tokenizer(str(model_dir))
    answers = {p.problem[:80]: p.answer for p in problems}
    step = {"n": 0}
    holder: dict[str, Any] = {}

    def engine_factory(model: Any) -> Any:
        holder["engine"] = RestartingEngine(
            HFEngine(model, HFEngineConfig(max_batch_size=16, seed=0)),
            tokenizer,
            answers,
            args,
            [a, b],
            lambda: step["n"] + 1,
            lambda: source.runtime.executor,
        )
        return holder["engine"]

    source = AgentLoopSource(config, tokenizer, engine_factory=engine_factory)
    trainer_run = build_trainer(
        config, problems=problems, source=source, scorer=VerifierScorer(tokenizer, source.verify), num_processes=1
    )
    per_step: list[dict[str, Any]] = []

    class Record(TrainerCallback):
        def on_step_end(self, *_: Any, **__: Any) -> None:
            last = trainer_run.rollout.last
            slots = [(t.metadata.get("group_id"), t.metadata.get("sample_index")) for t in last.trajectories]
            records = [rec for t in last.trajectories for rec in t.tool_call_records]
            per_step.append(
                {
                    "step": step["n"] + 1,
                    "trajectories": len(last.trajectories),
                    "distinct_slots": len(set(slots)),
                    "calls": len(records),
                    "answered": sum(rec.result is not None for rec in records),
                    "by_status": {
                        s: sum(1 for rec in records if rec.result is not None and rec.result.status == s)
                        for s in ("ok", "error", "timeout", "killed", "internal")
                    },
                    **{
                        k: last.metrics.get(k, 0.0)
                        for k in (
                            "tool_calls/internal",
                            "sandbox/failovers",
                            "sandbox/resent",
                            "sandbox/internal_retries",
                            "accuracy",
                        )
                    },
                }
            )
            step["n"] += 1

    trainer_run.trainer.add_callback(Record())
    restart: dict[str, Any] = {"victim": None, "killed": False, "restarted": False, "error": None}
    try:
        trainer_run.trainer.train()
    finally:
        trainer_run.close()
        engine = holder.get("engine")
        if engine is not None and engine.restart_thread is not None:
            engine.restart_thread.join(timeout=120)
            restart = dict(engine.restart)
            if engine.restart_thread.is_alive():
                restart["error"] = restart["error"] or "the restart thread was still running after 120 s"
        a.stop()
        b.stop()
    expected = pps * group * 2
    failed = []
    if not (restart["killed"] and restart["restarted"]):
        failed.append(f"the killed service did not come back on its port: {restart}")
    for row in per_step:
        if row["trajectories"] != expected or row["distinct_slots"] != expected:
            failed.append(f"step {row['step']}: {row['trajectories']} trajectories, {row['distinct_slots']} slots")
        if row["calls"] != expected or row["answered"] != row["calls"]:
            failed.append(f"step {row['step']}: {row['calls']} calls, {row['answered']} answered")
        if row["by_status"]["internal"] != row["tool_calls/internal"]:
            failed.append(
                f"step {row['step']}: internal calls {row['by_status']['internal']} but the metric "
                f"says {row['tool_calls/internal']}"
            )

    def met(r: dict[str, Any]) -> float:
        return r["sandbox/failovers"] + r["sandbox/resent"] + r["sandbox/internal_retries"] + r["tool_calls/internal"]

    restart_row = next((r for r in per_step if r["step"] == args.restart_step), None)
    if restart_row is None or met(restart_row) == 0:
        failed.append("the restart step reports no call that met the restart")
    if any(met(r) for r in per_step if r["step"] != args.restart_step):
        failed.append("a step other than the restart step reports calls that met a restart")
    logged = [
        json.loads(line)
        for f in sorted((out / "run" / "trajectories").glob("step_*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    ids = [(rec["step"], rec["rank"], rec["problem_id"], rec["sample"]) for rec in logged]  # one record per slot
    if len(logged) != expected * len(per_step) or len(set(ids)) != len(ids):
        failed.append(
            f"{len(logged)} trajectories logged ({len(set(ids))} distinct ids), {expected * len(per_step)} expected"
        )
    report = {
        "steps": per_step,
        "expected_per_step": expected,
        "service_events": a.events + b.events,
        "restart": restart,
        "services": [a.url, b.url],
        "logged_trajectories": len(logged),
        "wall_s": time.time() - t0,
        "failed_checks": failed,
    }
    print(json.dumps({k: v for k, v in report.items() if k != "steps"}, indent=1))
    print(
        f"{'step':>4} {'trajs':>5} {'calls':>5} {'ok':>4} {'internal':>8} {'failovers':>9} {'resent':>6} {'retries':>7}"
    )
    for r in per_step:
        print(
            f"{r['step']:>4} {r['trajectories']:>5} {r['calls']:>5} {r['by_status']['ok']:>4} "
            f"{r['tool_calls/internal']:>8.0f} {r['sandbox/failovers']:>9.0f} {r['sandbox/resent']:>6.0f} "
            f"{r['sandbox/internal_retries']:>7.0f}"
        )
    print("checks: " + ("all passed" if not failed else "FAILED: " + "; ".join(failed)))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--restart-step", type=int, default=5)
    parser.add_argument("--call-sleep-s", type=float, default=2.0)
    parser.add_argument("--kill-after-s", type=float, default=0.5)
    parser.add_argument("--down-s", type=float, default=1.0)
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--prompt-style",
        default="full",
        choices=["full", "compact"],
        help="the system prompt (protocol.prompt_style); compact: about a quarter of the prompt tokens (the test)",
    )
    args = parser.parse_args(argv)
    return 1 if run(args)["failed_checks"] else 0


if __name__ == "__main__":
    sys.exit(main())
