"""Windows of real text no measured process has seen: disjoint per process, with a shadow after each."""

import pytest

from evalbot.measure.windows import CorpusExhausted, WindowAllocator


def spans(ws, shadow):
    return sorted((w.offset, w.offset + w.length + shadow) for w in ws)


def disjoint(ivs):
    return all(a[1] <= b[0] for a, b in zip(ivs, ivs[1:]))


def test_no_process_sees_a_window_or_its_continuation_twice():
    ids = list(range(200_000))
    w = WindowAllocator({"code": ids, "prose": ids}, seed=5, shadow=300)
    a = [w.take("code", 4096, ["m1", "p1"]) for _ in range(20)]
    b = [w.take("code", 4096, ["m2", "p2"]) for _ in range(20)]
    c = [w.take("code", 1024, ["m1", "p2"]) for _ in range(10)]
    assert disjoint(spans(a + c, 300)) and disjoint(spans(b + c, 300))  # per process: never overlapping
    assert not disjoint(spans(a + b, 300))  # processes that share nothing may see the same text
    assert all(list(x.ids) == ids[x.offset:x.offset + x.length] and len(x.ids) == x.length for x in a + b + c)


def test_the_seed_decides_the_windows():
    ids = list(range(50_000))
    one = [w.offset for w in [WindowAllocator({"c": ids}, 9, 10).take("c", 100) for _ in range(1)]]
    two = [w.offset for w in [WindowAllocator({"c": ids}, 9, 10).take("c", 100) for _ in range(1)]]
    other = [w.offset for w in [WindowAllocator({"c": ids}, 10, 10).take("c", 100) for _ in range(1)]]
    assert one == two and one != other


def test_exhaustion_is_a_clear_error_and_capacity_says_so_before():
    w = WindowAllocator({"c": list(range(1000))}, 1, 100)
    while w.capacity("c", 200) > 0:
        w.take("c", 200)
    with pytest.raises(CorpusExhausted, match="no unclaimed stretch of 300 tokens"):
        for _ in range(10):
            w.take("c", 200)
    with pytest.raises(KeyError, match="unknown corpus"):
        w.take("nope", 10)


def test_a_window_at_the_end_of_a_stretch_is_still_exactly_as_long_as_asked():
    """The last valid start of a free stretch [a, b) is b - need: a window starting one later was one
    token short at the corpus end (and overlapped the next claim elsewhere)."""
    for seed in range(50):
        w = WindowAllocator({"c": list(range(10))}, seed, 0)
        assert len(w.take("c", 10).ids) == 10
        with pytest.raises(CorpusExhausted):
            w.take("c", 1)


def test_a_round_takes_all_its_windows_or_none():
    w = WindowAllocator({"c": list(range(3000))}, 4, 100)
    got = w.take_many("c", [200, 1000, 500], ["m", "p"])
    assert [x.length for x in got] == [200, 1000, 500]  # in the order asked, placed longest first
    assert disjoint(spans(got, 100))
    before = (dict(w.free), len(w.taken))
    with pytest.raises(CorpusExhausted):
        w.take_many("c", [200, 1000, 1000], ["m", "p"])  # the first two would fit, the third does not
    assert (dict(w.free), len(w.taken)) == before  # nothing was claimed
    assert w.take_many("c", [200], ["m"])[0].length == 200  # and the allocator goes on
