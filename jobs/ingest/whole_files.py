"""Files of many images (tar shards, parquet files of image bytes) that an ingest committed whole,
left out of the next ingest while unchanged.

A folder's listing names every image, so a re-ingest finds the new ones without reading a file;
a tar shard tells its images' keys only when read through, so without a record a re-ingest that
finds nothing new reads and hashes every shard again. An ingest records a file once every
partition reading it is committed (its rows and its refusals are in the store) and none of its
images was unreadable (those are read again, as a folder's are), with the size and modification
time the file had when listed; the next ingest as the same split leaves out each recorded file
whose size and time are unchanged. A file that changed (a shard appended to) is read again: its
committed keys are skipped as ever, so only its new images are added.

The record holds while the store keeps every row it held then: it is kept with the store's
batches at the time (id, digest, rows forgotten), and a batch removed or a row forgotten since
voids it, so that the files are read again and the rows taken away come back, as a folder's do.
Only local files are recorded (an object store's are read again, as a folder there is).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from imgscale.storage import (
    FeatureStore,
    ImagePartition,
    local_file_stats,
    read_whole_files,
    write_whole_files,
)


@dataclass
class WholeFiles:
    """What an ingest as ``split`` knows of its source's files of many images: ``unchanged``,
    those committed whole before and unchanged since (left out); ``stats``, the (size, mtime_ns)
    each local one had when listed; and, as the ingest goes, those committed whole (`committed`).
    ``batches`` are the store's batches when listed (`FeatureStore.batches`)."""

    split: str
    stats: dict[str, tuple[int, int]]
    unchanged: frozenset[str] = frozenset()
    batches: list[dict[str, Any]] = field(default_factory=list)
    whole: set[str] = field(default_factory=set)
    """Files committed whole: the unchanged ones, those no partition reads (every image
    committed), and those whose partitions this ingest committed."""
    _partitions: Counter[str] = field(default_factory=Counter)
    _committed: Counter[str] = field(default_factory=Counter)
    _unreadable: set[str] = field(default_factory=set)
    _recorded: set[str] = field(default_factory=set)

    def read_by(self, partitions: Sequence[ImagePartition]) -> None:
        """The ingest's ``partitions``: a listed file that none reads holds no new image."""
        self._partitions = Counter(str(f) for p in partitions for f in p.source_files)
        self.whole = {f for f in self.stats if not self._partitions[f]}
        self._recorded = set(self.unchanged)

    def committed(self, files: Iterable[str], unreadable: Iterable[str] = ()) -> None:
        """A commit holding one partition's outcome for each of ``files`` (a file once for each
        partition of it) is in the store; ``unreadable`` are files one of whose images could not
        be read: not whole, so read again."""
        self._unreadable.update(unreadable)
        for file in files:
            self._committed[file] += 1
            done = self._committed[file] == self._partitions[file]
            if done and file in self.stats and file not in self._unreadable:
                self.whole.add(file)

    @property
    def news(self) -> bool:
        """Whether files were found whole since the record was last kept."""
        return bool(self.whole - self._recorded)

    def keep(self, store: FeatureStore) -> None:
        """Record the files committed whole in ``store``, with its batches when listed and those
        committed since."""
        listed = {(b["batch_id"], b["digest"]) for b in self.batches}
        since = [b for b in store.batches() if (b["batch_id"], b["digest"]) not in listed]
        files = sorted(self.whole)
        listing = pa.table(
            {
                "key": pa.array(files, pa.string()),
                "size": pa.array([self.stats[f][0] for f in files], pa.int64()),
                "mtime_ns": pa.array([self.stats[f][1] for f in files], pa.int64()),
            }
        )
        write_whole_files(store.path, self.split, listing, [*self.batches, *since])
        self._recorded = set(self.whole)


def find_whole_files(
    store: FeatureStore | None, split: str, files: Sequence[Any]
) -> WholeFiles | None:
    """What ``store`` records of the source ``files`` (tar shards, parquet files) committed
    whole as ``split``; None for a source of image files (a folder, a list file)."""
    if not files:
        return None
    stats = local_file_stats(files)
    if store is None or not stats:
        return WholeFiles(split, stats)
    batches = store.batches()
    recorded, batches_then = read_whole_files(store.path, split)
    if not _still_holds(batches_then, batches):
        return WholeFiles(split, stats, batches=batches)
    then = zip(
        recorded.column("key").to_pylist(),
        recorded.column("size").to_pylist(),
        recorded.column("mtime_ns").to_pylist(),
        strict=True,
    )
    unchanged = frozenset(key for key, *stat in then if stats.get(key) == tuple(stat))
    return WholeFiles(split, stats, unchanged, batches)


def _still_holds(then: list[dict[str, Any]], now: list[dict[str, Any]]) -> bool:
    """Whether each batch of ``then`` is live in ``now`` with the same digest and no row
    forgotten since: the rows of the files recorded then are all still in the store."""
    live = {(b["batch_id"], b["digest"]): b["forgotten"] for b in now}
    return all(live.get((b["batch_id"], b["digest"])) == b["forgotten"] for b in then)
