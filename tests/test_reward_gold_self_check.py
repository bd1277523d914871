"""Every packaged benchmark's reference answer verifies against itself through the grading paths (issue 23).

The string fast path would make any reference equal to itself (identical texts), so it is off here: each
reference goes through reading, the hedge check, the integer path and math-verify in real sandbox workers, as an
answer written like the reference would. A grading rule that breaks a legitimate MATH-500 answer (a text answer,
an interval, a complex number, a matrix, a unit) fails this test; so does a reference the verifier cannot parse.
"""

from __future__ import annotations

import asyncio

import pytest

from tirl.data.benchmarks import list_benchmarks, load_benchmark
from tirl.reward import PRELOAD_MODULES, Verifier, VerifierConfig, VerifierStats, VerifyItem
from tirl.sandbox import LocalSandbox

PACKAGED = ["aime24", "aime25", "amc23", "hmmt25_feb", "math500", "toolmath"]


def _references() -> list[tuple[str, str, str]]:
    rows = []
    for name in PACKAGED:
        for problem in load_benchmark(name):
            rows.append((f"{name}/{problem.id}", problem.answer, problem.problem))
    return rows


def test_the_packaged_benchmarks_are_the_ones_checked() -> None:
    assert set(PACKAGED) <= set(list_benchmarks())


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_packaged_reference_verifies_against_itself() -> None:
    rows = _references()
    assert len(rows) >= 700
    config = VerifierConfig(timeout_s=20.0, string_fast_path=False)

    async def run() -> tuple[list, list]:
        sandbox = LocalSandbox(preload=PRELOAD_MODULES)
        try:
            verifier = Verifier(sandbox, config, VerifierStats())
            verdicts = await verifier.averify_batch(
                [VerifyItem(None, gold, answer=gold, question=question) for _, gold, question in rows]
            )
            unparsable = await verifier.acheck_references([gold for _, gold, _ in rows])
            return verdicts, unparsable
        finally:
            await sandbox.aclose()

    verdicts, unparsable = asyncio.run(run())
    failures = [
        (row_id, gold, v.status, v.detail)
        for (row_id, gold, _), v in zip(rows, verdicts)
        if not (v.status == "ok" and v.correct)
    ]
    assert not failures, failures[:20]
    bad = [(row_id, gold, why) for (row_id, gold, _), why in zip(rows, unparsable) if why is not None]
    assert not bad, bad[:20]
