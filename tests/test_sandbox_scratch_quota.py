"""A call's scratch space is its own quota (issue 41, item 2): no path from one call to another call's failure.

A hostile review found that a call which filled its worker's shared scratch tmpfs (directories until no inode
was left, then a sleep) made the next call started on that worker fail in its set-up ("No space left on
device" creating its scratch directory): answered ``internal``, which the trainer masks out of the loss, for
the calls of *other* trajectories too. Each call now has a tmpfs of its own (``scratch_mb`` bytes,
``scratch_inodes`` files): filling it is that call's ``error``, named in its stderr, and the calls beside it
and after it on the same worker answer normally.

The pool is small on purpose (one worker, two slots; a tiny quota) so every call shares the filler's worker.
"""

from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio

from sandbox_helpers import assert_follow_up_ok, layer_active
from tirl.sandbox import ExecutionRequest, LocalSandbox
from tirl.sandbox.outcome import assemble

on_pool = pytest.mark.asyncio(loop_scope="module")

SCRATCH_INODES = 256
SCRATCH_MB = 2
#: How long a filler holds its full scratch: long enough for several neighbours to start meanwhile (no
#: assertion on time; a busy machine only makes fewer neighbours run inside the window).
HOLD_S = 6

FILL_INODES = (
    "import os, time\nn = 0\ntry:\n    while True:\n        os.mkdir(f'd{n}'); n += 1\n"
    f"except OSError as exc:\n    print('full', exc.errno, flush=True)\ntime.sleep({HOLD_S})"
)
FILL_BYTES = (
    "import os, time\ntry:\n    with open('big', 'wb') as fh:\n        while True:\n"
    "            fh.write(b'x' * 65536); fh.flush()\n"
    f"except OSError as exc:\n    print('full', exc.errno, flush=True)\ntime.sleep({HOLD_S})"
)
#: An ordinary call that needs its scratch: writes a file and reads it back.
NEIGHBOUR = "open('note.txt', 'w').write('{i}')\nprint('neighbour', open('note.txt').read())"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sb():
    sandbox = LocalSandbox(
        workers=1, slots_per_worker=2, preload=(), scratch_inodes=SCRATCH_INODES, scratch_mb=SCRATCH_MB
    )
    await sandbox.start()
    if not layer_active(await sandbox.layer_report(), "mount_namespace"):
        await sandbox.aclose()
        pytest.skip("no mount namespace on this machine: scratch is a plain directory without a quota")
    yield sandbox
    await sandbox.aclose()


async def _neighbours_while(sb: LocalSandbox, filler: asyncio.Future) -> list:
    """Ordinary calls on the pool, three at a time (more than its free slot: they queue for the filler's
    worker), until ``filler`` is done; returns (result, expected stdout) pairs."""
    seen = []
    i = 0
    while not filler.done():
        batch = [ExecutionRequest(NEIGHBOUR.format(i=i + k), timeout_s=60) for k in range(3)]
        results = await sb.run_batch(batch)
        seen.extend((r, f"neighbour {i + k}\n") for k, r in enumerate(results))
        i += 3
    return seen


@on_pool
@pytest.mark.parametrize("code", [FILL_INODES, FILL_BYTES], ids=["inodes", "bytes"])
async def test_a_full_scratch_fails_only_its_own_call(sb, code):
    filler = asyncio.ensure_future(sb.run(ExecutionRequest(code, timeout_s=60)))
    neighbours = await _neighbours_while(sb, filler)
    result = await filler
    assert neighbours, "no neighbour ran while the filler held its scratch"
    bad = [(r.status, r.stdout, r.stderr) for r, want in neighbours if (r.status, r.stdout) != ("ok", want)]
    assert bad == [], bad  # before: internal, "could not start the call: No space left on device"
    assert result.stdout.startswith("full 28"), result  # ENOSPC: the quota, reached
    assert result.status == "error", result  # the call's own doing (it even caught the OSError), never internal
    assert f"scratch space quota exceeded: {SCRATCH_INODES} files / {SCRATCH_MB * 1024 * 1024} bytes" in (result.stderr)
    await assert_follow_up_ok(sb)  # the next call on the same worker


@on_pool
async def test_an_uncaught_no_space_error_is_the_calls_error(sb):
    code = "import os\nfor n in range(100_000):\n    os.mkdir(f'd{n}')"
    result = await sb.run(ExecutionRequest(code, timeout_s=60))
    assert (result.status, result.error_type) == ("error", "OSError"), result
    assert "scratch space quota exceeded" in result.stderr
    await assert_follow_up_ok(sb)


@on_pool
async def test_an_ordinary_call_is_not_flagged(sb):
    result = await sb.run(ExecutionRequest("import os\nfor n in range(20):\n    os.mkdir(f'd{n}')\nprint('ok')"))
    assert (result.status, result.stdout, result.stderr) == ("ok", "ok\n", "")


def _done_frame(**changes) -> dict:
    meta = {
        "wait_status": 0,
        "duration_s": 0.1,
        "kill_reason": None,
        "oom_kills": 0,
        "timeout_s": 10.0,
        "memory_mb": 512,
        "max_output_bytes": 1024,
        "out_total": 0,
        "err_total": 0,
        "res_total": 3,
        "res_cap": 4096,
        "signal_note": "",
        "scratch_full": False,
        "scratch_mb": 2,
        "scratch_inodes": 10,
    }
    return {**meta, **changes}


@pytest.mark.parametrize(
    ("changes", "status"),
    [
        ({}, "ok"),
        ({"scratch_full": True}, "error"),
        ({"scratch_full": True, "kill_reason": "timeout"}, "timeout"),  # the worse outcome stays, with the note
    ],
)
def test_assemble_names_the_quota(changes, status):
    fields = assemble(_done_frame(**changes), b"", b"", b"S{}")
    assert fields["status"] == status
    assert ("scratch space quota exceeded: 10 files / 2097152 bytes per call" in fields["stderr"]) == bool(changes)
