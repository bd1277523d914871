"""Tests of tirl.data.benchmarks: packaged files match their provenance, GSM8K parsing, local JSONL errors."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
import tomllib
from pathlib import Path

import pytest

from tirl.data import BENCHMARKS, BenchmarkError, list_benchmarks, load_benchmark
from tirl.data.benchmarks import BENCHMARK_DIR, gsm8k_answer

ROOT = Path(__file__).resolve().parents[1]
PACKAGED = ["aime24", "aime25", "amc23", "hmmt25_feb", "math500", "toolmath"]


def _provenance_table() -> dict[str, tuple[int, int, str]]:
    text = (BENCHMARK_DIR / "PROVENANCE.md").read_text()
    rows = re.findall(r"^\| (\w+\.jsonl) \| (\d+) \| (\d+) \| `([0-9a-f]{64})` \|$", text, re.M)
    return {name: (int(n), int(size), sha) for name, n, size, sha in rows}


def test_every_packaged_file_matches_its_provenance_checksum():
    table = _provenance_table()
    assert sorted(table) == sorted(f"{n}.jsonl" for n in PACKAGED)
    for name, (rows, size, sha) in table.items():
        data = (BENCHMARK_DIR / name).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (size, sha), name
        assert len(load_benchmark(name.removesuffix(".jsonl"))) == rows


def test_package_data_patterns_cover_the_shipped_files():
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["tirl"]
    pkg_root = ROOT / "src" / "tirl"
    for f in BENCHMARK_DIR.iterdir():
        rel = f.relative_to(pkg_root).as_posix()
        assert any(fnmatch.fnmatch(rel, p) for p in patterns), rel


@pytest.mark.parametrize("name", list_benchmarks())
def test_builtin_benchmarks_have_unique_ids_and_nonempty_fields(name):
    problems = load_benchmark(name)
    assert len({p.id for p in problems}) == len(problems) > 0
    assert all(p.problem.strip() and p.answer.strip() and p.source for p in problems)


@pytest.mark.parametrize("name", ["aime24", "aime25"])
def test_aime_answers_are_integers_0_to_999(name):
    assert all(re.fullmatch(r"\d{1,3}", p.answer) for p in load_benchmark(name))


def test_math500_keeps_subject_and_level_as_extra():
    p = load_benchmark("math500")[0]
    assert set(p.meta) == {"subject", "level", "unique_id"} and 1 <= p.meta["level"] <= 5
    assert "Please reason step by step" not in p.problem


def test_gsm8k_answers_are_the_marked_integers():
    problems = load_benchmark("gsm8k")
    assert len(problems) == 1319
    assert all(re.fullmatch(r"-?\d+", p.answer) for p in problems)
    with_commas = [p for p in problems if re.search(r"####\s*\d{1,3}(,\d{3})+", p.meta["solution"])]
    assert with_commas and all("," not in p.answer for p in with_commas)


def test_gsm8k_answer_uses_the_last_marker_and_drops_thousands_separators():
    assert gsm8k_answer("a #### b\nso 2 + 2 = 4\n#### 1,600") == "1600"
    with pytest.raises(BenchmarkError, match="####"):
        gsm8k_answer("no marker here, the answer is 4")


def test_limit_keeps_the_first_problems_in_order():
    full = load_benchmark("aime25")
    assert load_benchmark("aime25", limit=5) == full[:5]
    assert load_benchmark("aime25", limit=0) == []


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(BenchmarkError) as err:
        load_benchmark("aime26")
    assert all(name in str(err.value) for name in BENCHMARKS)


def _write(tmp_path, lines) -> Path:
    f = tmp_path / "mine.jsonl"
    f.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return f


def test_local_jsonl_loads_with_defaults_and_extras(tmp_path):
    f = _write(
        tmp_path,
        [
            {"problem": "1+1?", "answer": 2, "topic": "add"},
            "",
            {"problem": "x", "answer": 27.0, "id": "q7", "source": "me"},
        ],
    )
    a, b = load_benchmark(f)
    assert (a.id, a.answer, a.source, a.meta) == ("mine-0", "2", str(f), {"topic": "add"})
    assert (b.id, b.answer, b.source, b.meta) == ("q7", "27", "me", {})


@pytest.mark.parametrize(
    "lines,needle",
    [
        ([{"problem": "p"}], ":1: missing field(s) answer"),
        ([{"problem": "p", "answer": "1"}, {"question": "q", "answer": "2"}], ":2: missing field(s) problem"),
        (['{"problem": "p", "answer": '], ":1: not valid JSON"),
        ([["p", "1"]], "must be a JSON object"),
        ([{"problem": "  ", "answer": "1"}], "'problem' must be a non-empty string"),
        ([{"problem": "p", "answer": None}], "'answer' must be"),
        ([{"problem": "p", "answer": "1", "id": "a"}, {"problem": "q", "answer": "2", "id": "a"}], "duplicate id"),
        ([""], "no problems"),
    ],
)
def test_malformed_local_jsonl_gets_a_clear_error(tmp_path, lines, needle):
    with pytest.raises(BenchmarkError) as err:
        load_benchmark(_write(tmp_path, lines))
    assert needle in str(err.value)
