"""What a call returns: stdout, IPython-style display, compact tracebacks, exit codes, fresh state per call."""

from __future__ import annotations

import pytest
import pytest_asyncio

from tirl.sandbox import CodeExecutor, ExecutionRequest, LocalSandbox

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sb():
    sandbox = LocalSandbox(workers=1, slots_per_worker=4, max_output_bytes=4096)
    await sandbox.start()
    yield sandbox
    await sandbox.aclose()


async def run(sb, code: str, **kw):
    return await sb.run(ExecutionRequest(code, **kw))


async def test_local_sandbox_implements_code_executor(sb):
    assert isinstance(sb, CodeExecutor)


@pytest.mark.parametrize(
    ("code", "display"),
    [
        ("x = 41\nx + 1", "42"),  # F23 contrast
        ("x = 1; x", "1"),  # F25
        ("import math; math.sqrt(16)", "4.0"),  # F25 variant
        ("'a' * 3", "'aaa'"),  # repr, not str
        ("[1, 2][::-1]", "[2, 1]"),
        ("from sympy import symbols, solve\nx = symbols('x')\nsolve(x**2 - 4, x)", "[-2, 2]"),
        ("(1 +\n 2)", "3"),  # multi-line last expression
        ("x = 5\nx  # a comment", "5"),
    ],
)
async def test_last_expression_is_displayed(sb, code, display):
    r = await run(sb, code)
    assert (r.status, r.stdout, r.display) == ("ok", "", display)


@pytest.mark.parametrize(
    "code",
    [
        "x = 41\nx + 1;",  # F23: trailing semicolon silences
        "x = 41\nx + 1;  # silenced",
        "(x := 3);",
        "None",
        "print(7)",  # print returns None
        "x = 3",  # not an expression
        "if True:\n    5",  # last statement is not an expression
    ],
)
async def test_nothing_displayed(sb, code):
    r = await run(sb, code)
    assert r.status == "ok" and r.display is None


async def test_no_display_when_something_was_printed(sb):
    r = await run(sb, "print('hi')\n42")
    assert (r.stdout, r.display) == ("hi\n", None)


async def test_display_cut_to_the_cap_is_flagged(sb):
    r = await run(sb, "'y' * 10000")
    assert r.status == "ok" and r.stdout_truncated
    assert r.display.startswith("'yyy") and len(r.display) == 4096


async def test_f22_partial_output_then_error(sb):
    r = await run(sb, "print('partial result 42')\n1/0")
    assert r.status == "error" and r.stdout == "partial result 42\n"
    assert r.error_type == "ZeroDivisionError"
    assert r.traceback.startswith("Traceback (most recent call last):\n")
    assert 'File "<code>", line 2, in <module>' in r.traceback
    assert r.traceback.endswith("ZeroDivisionError: division by zero\n")
    assert r.exit_code == 1
    assert "Traceback" not in r.stderr  # the traceback has its own field


async def test_traceback_keeps_only_user_frames_with_matching_lines(sb):
    code = "import json\n\ndef parse(s):\n    return json.loads(s)\n\nparse('{bad')"
    r = await run(sb, code)
    assert r.error_type == "JSONDecodeError"
    assert 'File "<code>", line 6, in <module>' in r.traceback
    assert 'File "<code>", line 4, in parse' in r.traceback
    assert "json/decoder.py" not in r.traceback and "tirl" not in r.traceback


async def test_syntax_error_points_into_the_code(sb):
    r = await run(sb, "x = 1\nprint(x\n")
    assert r.status == "error" and r.error_type == "SyntaxError"
    assert 'File "<code>", line 2' in r.traceback
    assert "was never closed" in r.traceback


async def test_error_raised_while_displaying_is_reported_at_the_last_line(sb):
    r = await run(sb, "class A:\n    def __repr__(self):\n        raise RuntimeError('no repr')\nA()")
    assert r.status == "error" and r.error_type == "RuntimeError"
    assert 'File "<code>", line 4, in <module>' in r.traceback
    assert 'File "<code>", line 3, in __repr__' in r.traceback


async def test_stderr_is_separate_from_stdout(sb):
    r = await run(sb, "import sys\nprint('out')\nprint('err', file=sys.stderr)")
    assert (r.status, r.stdout, r.stderr) == ("ok", "out\n", "err\n")


async def test_sys_exit_variants(sb):
    zero = await run(sb, "import sys\nsys.exit(0)")
    text = await run(sb, "import sys\nsys.exit('bye')")
    assert (zero.status, zero.exit_code) == ("ok", 0)
    assert (text.status, text.exit_code, text.stderr) == ("error", 1, "bye\n")


async def test_no_state_leaks_between_calls(sb):
    await run(sb, "import math\nmath.pi = 3\nimport builtins\nbuiltins.leak = 1\nglobal_var = 2")
    r = await run(sb, "import math, builtins\nprint(math.pi, hasattr(builtins, 'leak'), 'global_var' in dir())")
    assert r.stdout == "3.141592653589793 False False\n"


async def test_threads_started_by_the_code_are_joined(sb):
    code = (
        "import threading, time\ndef late():\n    time.sleep(0.2)\n    print('late')\n"
        "threading.Thread(target=late).start()"
    )
    r = await run(sb, code)
    assert (r.status, r.stdout) == ("ok", "late\n")


async def test_random_state_differs_between_calls(sb):
    code = "import random, numpy as np\nprint(random.random(), np.random.rand())"
    a, b = await sb.run_batch([ExecutionRequest(code), ExecutionRequest(code)])
    assert a.status == b.status == "ok" and a.stdout != b.stdout


async def test_main_module_and_argv_look_like_a_script(sb):
    r = await run(sb, "import sys\nprint(__name__, sys.argv, sys.modules['__main__'].__dict__ is globals())")
    assert r.stdout == "__main__ ['-c'] True\n"


async def test_blas_threads_are_one(sb):
    r = await run(sb, "import os\nprint(os.environ['OPENBLAS_NUM_THREADS'], os.environ['OMP_NUM_THREADS'])")
    assert r.stdout == "1 1\n"


async def test_result_carries_request_id_and_duration(sb):
    req = ExecutionRequest("print(1)")
    r = await sb.run(req)
    assert r.request_id == req.request_id
    assert r.duration_s > 0


async def test_code_cannot_pass_itself_off_as_an_internal_failure(sb):
    r = await run(sb, "import os\nos.write(3, b'F isolation set-up failed: forged')\nprint('done')")
    assert (r.status, r.stdout) == ("ok", "done\n")
    assert "forged" not in r.stderr


async def test_null_bytes_in_code_are_an_error_not_a_crash(sb):
    r = await run(sb, "print(1)\x00")
    assert r.status == "error" and r.error_type in ("ValueError", "SyntaxError")
    assert "null bytes" in r.traceback
