"""Row-id uniqueness by hash (storage/ids.py): hashes against a plain FNV-1a, sorted runs against
a Python set, and hash collisions that never refuse an id."""

import numpy as np
import pyarrow as pa
import pytest

from imgscale.storage import ids as ids_module
from imgscale.storage.ids import HashRuns, first_repeated, id_hashes


def fnv1a(text: str) -> int:
    h = 14695981039346656037
    for byte in text.encode():
        h = ((h ^ byte) * 1099511628211) % 2**64
    return h


def test_hashes_are_fnv1a_of_the_utf8_bytes_for_sliced_and_chunked_arrays():
    ids = ["", "a", "b0:4", "image-000123.jpg", "naïve ✓"]
    expected = [fnv1a(i) for i in ids]
    assert id_hashes(pa.array(ids)).tolist() == expected
    assert id_hashes(pa.array(ids).slice(2)).tolist() == expected[2:]
    assert id_hashes(pa.chunked_array([ids[:2], ids[2:]])).tolist() == expected
    assert id_hashes(pa.array([], pa.string())).tolist() == []


@pytest.mark.parametrize("hashed_before", [0, ids_module.NUMPY_HASHED_IDS], ids=["numpy", "numba"])
def test_the_first_ids_hashed_by_numpy_and_later_ones_by_the_compiled_loop_hash_alike(
    monkeypatch, hashed_before
):
    monkeypatch.setattr(ids_module, "_numpy_hashed", hashed_before)
    rng = np.random.default_rng(0)
    ids = [f"{'x' * int(n)}/{i}.jpg" for i, n in enumerate(rng.integers(0, 40, 300))]
    ids += ["", "naïve ✓"]
    assert id_hashes(pa.array(ids)).tolist() == [fnv1a(i) for i in ids]
    assert ids_module._numpy_hashed == hashed_before + (len(ids) if hashed_before == 0 else 0)


def test_runs_answer_membership_as_a_set_after_many_blocks():
    rng = np.random.default_rng(0)
    runs, reference = HashRuns(), set()
    for size in rng.integers(0, 300, 40):
        block = rng.integers(0, 5000, size).astype(np.uint64)
        runs.add(block)
        reference.update(block.tolist())
    probe = np.arange(5000, dtype=np.uint64)
    assert runs.contains(probe).tolist() == [p in reference for p in probe.tolist()]
    assert len(runs._runs) <= 2 * np.log2(len(runs)) + 1


def test_first_repeated_names_the_first_repeat_inside_the_block_or_against_what_was_seen():
    ids = pa.array(["a", "b", "c", "b", "a"])
    assert first_repeated(ids, id_hashes(ids), []) == 3
    seen = HashRuns()
    seen.add(id_hashes(pa.array(["c"])))
    assert first_repeated(ids, id_hashes(ids), [(seen, lambda: pa.array(["c"]))]) == 2
    assert first_repeated(pa.array(["x", "y"]), id_hashes(pa.array(["x", "y"])), []) is None


def test_a_hash_collision_is_confirmed_on_the_ids_and_refuses_nothing():
    # Two different ids given one hash: inside a block, and against a seen collection whose
    # hashes hold "x"'s but whose ids do not hold "x".
    assert first_repeated(pa.array(["p", "q"]), np.array([7, 7], np.uint64), []) is None
    assert first_repeated(pa.array(["p", "p"]), np.array([7, 7], np.uint64), []) == 1
    seen = HashRuns()
    seen.add(id_hashes(pa.array(["x"])))
    ids = pa.array(["w", "x"])
    assert first_repeated(ids, id_hashes(ids), [(seen, lambda: pa.array(["y"]))]) is None
