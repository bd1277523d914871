"""tests/schedule_order.py: the order the test files are handed to pytest-xdist's workers in."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from schedule_order import file_order


def test_one_worker_runs_the_slow_files_longest_first_then_the_rest_in_collection_order():
    files = ["a", "b", "c", "d", "e"]
    assert file_order(files, {"c": 50.0, "e": 120.0, "b": 0.0}, 1) == ["e", "c", "b", "a", "d"]


def test_the_longest_files_worker_is_handed_the_shortest_file_second():
    # the vLLM-backed suite's shape: one long 1-test file, four slow ones, one short unmarked file
    files = ["colocate", "eval_launch", "launch", "bench", "staleness", "ablation"]
    seconds = {"colocate": 30.0, "eval_launch": 30.0, "launch": 50.0, "bench": 150.0, "staleness": 30.0}
    order = file_order(files, seconds, 2)
    # workers 0 and 1 get bench and launch, then (each 1-2 tests) ablation and the next-shortest up front
    assert order == ["bench", "launch", "ablation", "staleness", "colocate", "eval_launch"]


def test_few_files_keep_the_longest_first_order():
    assert file_order(["a", "b", "c", "d"], {"a": 1.0, "b": 9.0, "c": 5.0}, 2) == ["b", "c", "a", "d"]


@given(
    st.lists(st.integers(0, 30), min_size=0, max_size=25, unique=True),
    st.dictionaries(st.integers(0, 30), st.floats(0, 500, allow_nan=False), max_size=20),
    st.integers(1, 4),
)
def test_the_order_is_a_permutation_with_the_longest_first_and_the_shortest_second(files, marks, workers):
    seconds = {f: s for f, s in marks.items() if f in files}
    order = file_order(files, seconds, workers)
    assert sorted(order) == sorted(files)

    def rank(f):  # larger is shorter: unmarked files count as shorter than any marked one
        return (f not in seconds, -seconds.get(f, 0.0))

    head = order[:workers]
    assert all(rank(h) <= rank(f) for h in head for f in order[workers:])  # no file ahead of a longer one
    if workers >= 2 and len(files) > 2 * workers:
        second = order[workers : 2 * workers]
        assert all(rank(s) >= rank(f) for s in second for f in order[2 * workers :])  # the shortest go second
        assert [rank(s) for s in second] == sorted((rank(s) for s in second), reverse=True)  # shortest first
