"""Row ids checked for uniqueness by their 64-bit hashes.

A store of 10⁷ rows would need about a gigabyte to hold its ids as Python strings in a set; as
hashes they take 8 bytes an id. Ids are hashed with FNV-1a over their UTF-8 bytes and the hashes
kept in sorted runs (`HashRuns`). A hash match is only a candidate: `first_repeated` confirms it
on the ids themselves, so two different ids with one hash cost an exact lookup and are never
refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# The first ids a process hashes, up to this many, are hashed by numpy (`_fnv1a_numpy`, a vector
# operation a byte position): importing numba and loading its compiled loop takes longer than
# hashing them, and a small ingest's commit waited for it. Later ids go to the compiled loop.
NUMPY_HASHED_IDS = 100_000
FNV_OFFSET = np.uint64(14695981039346656037)
FNV_PRIME = np.uint64(1099511628211)
_numpy_hashed = 0


def id_hashes(ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """FNV-1a hash (uint64) of each id, from the arrow string buffers (no Python strings)."""
    global _numpy_hashed
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks() if ids.num_chunks else pa.array([], pa.large_string())
    ids = ids.cast(pa.large_string())
    if len(ids) == 0:
        return np.empty(0, np.uint64)
    _, offsets, data = ids.buffers()
    offsets = np.frombuffer(offsets, np.int64)[ids.offset : ids.offset + len(ids) + 1]
    data = np.frombuffer(data, np.uint8) if data is not None else np.empty(0, np.uint8)
    if _numpy_hashed + len(ids) <= NUMPY_HASHED_IDS:
        _numpy_hashed += len(ids)
        return _fnv1a_numpy(offsets, data)
    from imgscale.storage._fnv1a import fnv1a  # numba: imported on the first write, not by reads

    return fnv1a(offsets, data, FNV_OFFSET, FNV_PRIME)


def _fnv1a_numpy(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """`fnv1a` in numpy: every id's next byte at once (uint64 products wrap, as FNV's do)."""
    starts, lengths = offsets[:-1], np.diff(offsets)
    out = np.full(len(lengths), FNV_OFFSET, np.uint64)
    for position in range(int(lengths.max())):
        live = np.flatnonzero(lengths > position)
        out[live] = (out[live] ^ data[starts[live] + position]) * FNV_PRIME
    return out


class HashRuns:
    """A growing multiset of hashes in sorted runs, merged while a run is no longer than twice
    the next (a log-structured merge): adding n hashes in any number of blocks sorts each hash
    O(log n) times, and a lookup searches O(log n) runs."""

    def __init__(self) -> None:
        self._runs: list[np.ndarray] = []

    def add(self, hashes: np.ndarray) -> None:
        if not len(hashes):
            return
        self._runs.append(np.sort(hashes))
        while len(self._runs) > 1 and len(self._runs[-2]) <= 2 * len(self._runs[-1]):
            last = self._runs.pop()
            self._runs[-1] = np.sort(np.concatenate([self._runs[-1], last]), kind="stable")

    def contains(self, hashes: np.ndarray) -> np.ndarray:
        """Whether each of ``hashes`` is in the set."""
        found = np.zeros(len(hashes), dtype=bool)
        for run in self._runs:
            at = np.minimum(np.searchsorted(run, hashes), len(run) - 1)
            found |= run[at] == hashes
        return found

    def __len__(self) -> int:
        return sum(len(run) for run in self._runs)


def first_repeated(
    ids: pa.Array,
    hashes: np.ndarray,
    seen: Sequence[tuple[HashRuns, Callable[[], pa.Array | pa.ChunkedArray]]],
) -> int | None:
    """Index of the first id of ``ids`` that repeats an earlier id of ``ids`` or is in one of
    the ``seen`` collections (each its hashes and a function returning its ids, called only
    when a hash matches), or None."""
    sorted_hashes = np.sort(hashes)
    in_block = np.isin(hashes, sorted_hashes[1:][sorted_hashes[1:] == sorted_hashes[:-1]])
    in_seen = [runs.contains(hashes) for runs, _ in seen]
    if not in_block.any() and not any(found.any() for found in in_seen):
        return None
    repeated = np.zeros(len(ids), dtype=bool)
    earlier: set[str] = set()
    for i in np.flatnonzero(in_block):  # ids sharing a hash with another id of the block
        value = ids[int(i)].as_py()
        repeated[i] = value in earlier
        earlier.add(value)
    for (_, lookup), found in zip(seen, in_seen, strict=True):
        maybe = np.flatnonzero(found & ~repeated)
        if len(maybe):
            exact = pc.is_in(ids.take(pa.array(maybe)), value_set=_one_array(lookup()))
            repeated[maybe[exact.to_numpy(zero_copy_only=False)]] = True
    hits = np.flatnonzero(repeated)
    return int(hits[0]) if len(hits) else None


def _one_array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks() if values.num_chunks else pa.array([], pa.string())
    return values
