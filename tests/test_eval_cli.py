"""``tirl eval`` from the command line on a real packaged model (SmolLM2-135M) with the local sandbox."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import pytest


def tirl(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "tirl.cli.main", *args], capture_output=True, text=True, cwd=cwd, timeout=900
    )


@pytest.mark.model
def test_eval_on_a_real_model_writes_records_and_table_then_resumes(tmp_path):
    out = tmp_path / "run"
    args = [
        "eval",
        "--model",
        "smollm2-135m-instruct",
        "--benchmarks",
        "gsm8k:2",
        "--samples",
        "1",
        "--max-response-tokens",
        "32",
        "--max-turns",
        "2",
        "--out-dir",
        str(out),
        "--quiet",
    ]
    first = tirl(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    records = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert sorted(r["problem_id"] for r in records) == ["gsm8k-0000", "gsm8k-0001"]
    for r in records:
        assert r["gold"] and r["verdict"]["status"] in ("ok", "no_answer")
        assert 0 < r["model_tokens"] <= r["num_response_tokens"] <= 32
        assert r["finish_reason"] in ("answer", "length", "max_turns", "eos")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["benchmarks"]["gsm8k"]["num_samples"] == 2
    assert "avg pass@1 (%)" in first.stdout and "gsm8k" in first.stdout

    again = tirl(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "0 new, 2 resumed" in again.stdout.replace("\n", " ")
    assert len((out / "trajectories.jsonl").read_text().splitlines()) == 2


def test_unknown_benchmark_is_a_clear_error_without_loading_a_model(tmp_path):
    res = tirl(
        "eval",
        "--model",
        "smollm2-135m-instruct",
        "--benchmarks",
        "nope",
        "--out-dir",
        str(tmp_path / "o"),
        cwd=tmp_path,
    )
    assert res.returncode == 2
    assert "unknown benchmark 'nope'" in res.stderr and "Traceback" not in res.stdout + res.stderr


def test_unknown_model_is_a_clear_error(tmp_path):
    res = tirl(
        "eval", "--model", "no-such-model", "--benchmarks", "aime25:1", "--out-dir", str(tmp_path / "o"), cwd=tmp_path
    )
    assert res.returncode == 2
    assert "no-such-model" in res.stderr and "Traceback" not in res.stdout + res.stderr


def test_bad_benchmark_count_is_a_clear_error(tmp_path):
    res = tirl("eval", "--model", "m", "--benchmarks", "aime25:zero", "--out-dir", str(tmp_path / "o"), cwd=tmp_path)
    assert res.returncode == 2 and "positive problem count" in res.stderr


@pytest.mark.model
def test_unreachable_sandbox_fails_fast_before_generating(tmp_path):
    res = tirl(
        "eval",
        "--model",
        "smollm2-135m-instruct",
        "--benchmarks",
        "gsm8k:1",
        "--samples",
        "1",
        "--sandbox",
        "http://127.0.0.1:9",
        "--out-dir",
        str(tmp_path / "o"),
        "--quiet",
        cwd=tmp_path,
    )
    assert res.returncode == 2, res.stdout + res.stderr
    assert "health check" in res.stderr
    assert not (tmp_path / "o" / "trajectories.jsonl").read_text()


def _interrupt_after(args: list[str], ready: str, cwd) -> tuple[int, str, str]:
    """Run ``python ARGS`` (SIGINT at its default, as in a terminal), send SIGINT once a line of its output
    contains ``ready``, and return its exit code, stdout and stderr (a generous timeout, no timing assertion)."""
    proc = subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if ready in line:
            break
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"still running 120 s after Ctrl-C: {''.join(seen)}{out}{err}") from None
    return proc.returncode, "".join(seen) + out, err


def test_ctrl_c_in_eval_ends_with_one_line_saying_how_to_resume(tmp_path):
    # issue 45: Ctrl-C in tirl eval was silent and took 20-60 s (the generation thread finishing its batch)
    out = tmp_path / "o"
    args = ["-m", "tirl.cli.main", "eval", "--model", "tiny:smollm2-135m-instruct", "--benchmarks", "gsm8k:20"]
    args += ["--samples", "4", "--max-response-tokens", "256", "--out-dir", str(out)]
    code, stdout, stderr = _interrupt_after(args, "trajectories (", cwd=tmp_path)
    assert code == 130, stdout + stderr
    lines = [line for line in stderr.splitlines() if "interrupted" in line]
    assert len(lines) == 1, stderr
    assert f"samples are stored in {out}: re-run the same command to resume" in lines[0]
    assert "Traceback" not in stderr and "Aborted" not in stdout + stderr
    assert (out / "run.json").is_file()


def test_an_interrupt_does_not_wait_for_a_slow_clean_up(tmp_path):
    # a launched vLLM server takes up to a minute to stop; the interrupted command ends without it
    script = tmp_path / "slow.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys, time
            from tirl.cli.eval import stop_promptly

            with stop_promptly(lambda: print("stopping: resume with the same command", file=sys.stderr)):
                try:
                    print("ready", flush=True)
                    time.sleep(600)
                finally:
                    time.sleep(600)  # what _stop(proc) of a vLLM server may wait
            """
        )
    )
    code, _, stderr = _interrupt_after([str(script)], "ready", cwd=tmp_path)
    assert code == 130 and stderr.strip() == "stopping: resume with the same command"
