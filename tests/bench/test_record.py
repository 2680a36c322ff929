"""A record from repetitions: the median, the extremes, and the ratio taken pair by pair."""

import pytest

from imgscale.bench.common import interleaved, record, repetitions
from imgscale.bench.registry import Context


def test_a_sequence_is_recorded_as_its_median_with_its_extremes_and_count():
    r = record("pass", [3.0, 1.0, 2.0], "s")
    assert (r["value"], r["value_min"], r["value_max"], r["repeats"]) == (2.0, 1.0, 3.0, 3)
    assert "ratio" not in r and "peer_value" not in r


def test_an_even_count_takes_the_mean_of_the_middle_two():
    r = record("pass", [4.0, 1.0], "s")
    assert (r["value"], r["value_min"], r["value_max"], r["repeats"]) == (2.5, 1.0, 4.0, 2)


def test_the_ratio_is_the_median_of_the_ratios_of_pairs_not_of_the_medians():
    r = record("pass", [2.0, 4.0, 6.0], "s", [1.0, 1.0, 3.0])
    # Pairs: 2/1, 4/1, 6/3 = 2, 4, 2. The medians' ratio would be 4/1 = 4.
    assert (r["ratio"], r["ratio_min"], r["ratio_max"]) == (2.0, 2.0, 4.0)
    assert r["peer_value"] == 1.0
    assert (r["value"], r["repeats"]) == (4.0, 3)


def test_one_measurement_stands_against_every_repetition_of_the_other_side():
    limit = record("pass vs the limit", [1.0, 3.0, 2.0], "GB/s", 4.0)
    assert (limit["ratio"], limit["ratio_min"], limit["ratio_max"]) == (0.5, 0.25, 0.75)
    assert limit["peer_value"] == 4.0
    once = record("ours once", 6.0, "s", [2.0, 3.0, 1.0])
    assert (once["ratio"], once["ratio_min"], once["ratio_max"]) == (3.0, 2.0, 6.0)
    assert once["repeats"] == 1


def test_a_float_is_one_measurement_with_no_spread():
    r = record("size", 5.0, "GiB", 2.5, why_once="a size")
    assert (r["value"], r["value_min"], r["value_max"], r["repeats"]) == (5.0, 5.0, 5.0, 1)
    assert (r["ratio"], r["ratio_min"], r["ratio_max"]) == (2.0, 2.0, 2.0)
    assert r["why_once"] == "a size"


def test_a_peer_at_zero_gives_an_infinite_ratio_as_before():
    assert record("x", [1.0, 2.0], "s", [0.0, 1.0])["ratio_max"] == float("inf")


def test_repetitions_that_do_not_pair_are_refused_by_name():
    with pytest.raises(ValueError, match="pass: 3 repetitions of ours against 2"):
        record("pass", [1.0, 2.0, 3.0], "s", [1.0, 2.0])
    with pytest.raises(ValueError, match="no repetitions of value"):
        record("pass", [], "s")


def test_interleaved_runs_the_measures_in_turn_round_after_round():
    calls = []

    def measure(name):
        def run():
            calls.append(name)
            return f"{name}{calls.count(name)}"

        return run

    ours, peer = interleaved(measure("ours"), measure("peer"), repeats=3)
    assert calls == ["ours", "peer"] * 3
    assert ours == ["ours1", "ours2", "ours3"] and peer == ["peer1", "peer2", "peer3"]


def test_repetitions_come_from_the_context_and_are_at_least_two_by_default():
    ctx = Context("tiny", out=None, workdir=None)
    assert repetitions(ctx) >= 2
    ctx.repeats = 5
    assert repetitions(ctx) == 5
