"""Which rows a store gained and lost since a model recorded its batches.

A model records the live batches it learned from as ``[batch_id, digest, forgotten]``
(`FeatureStore.batches`: the content digest of that commit of the batch, and how many of its
rows were forgotten then). Against the store as it is now, the rows it never saw are the live
rows of every batch it did not record (new, or committed again with other rows); the rows it saw
that the store no longer holds are the rows of a recorded batch now removed or replaced (its
tombstone keeps its rows and rows file on disk, `storage.writer.remove_batches`) and the rows of
a recorded batch forgotten since (`storage.forget`: the offsets past the recorded count). Both are
read here as positions in the row array plus their label and split, so a sum over rows can be
brought up to date by reading only them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from imgscale.storage.errors import StoreError
from imgscale.storage.forget import (
    FORGOTTEN_BEFORE,
    forgotten_count,
    forgotten_offsets,
    live_offsets,
)
from imgscale.storage.layout import batch_digest, check_row_ranges, read_checked_table, read_record


@dataclass
class ChangedRows:
    """Rows of one side of a change: positions in the row array, with their labels and splits
    (in the same order)."""

    positions: np.ndarray
    labels: np.ndarray
    splits: np.ndarray

    def in_split(self, split: str) -> ChangedRows:
        keep = self.splits == split
        return ChangedRows(self.positions[keep], self.labels[keep], self.splits[keep])


@dataclass
class StoreChange:
    """What `rows_changed_since` found: the rows to add, the rows to subtract, the batches
    added and removed (or replaced) and the rows forgotten since, and, of the commit record the
    positions are in, its live batches as a model records them (``[batch_id, digest,
    forgotten]``) and its live rows."""

    added: ChangedRows
    removed: ChangedRows
    added_batches: list[str]
    removed_batches: list[str]
    forgotten_rows: int
    batches: list[list[Any]]
    live_rows: int


def rows_changed_since(store: Any, recorded: list[list[Any]]) -> StoreChange:
    """The rows ``store`` gained and lost since a model recorded ``recorded`` (its
    ``store_batches``); StoreError naming the batch when rows it learned from are no longer on
    disk (a removed last batch, whose rows the store drops, or rows compacted away)."""
    path = store.path
    record = read_record(path)
    check_row_ranges(path, record)
    live = {(b["batch_id"], batch_digest(path, b)): b for b in record["batches"]}
    tombstones = {(r["batch_id"], r["digest"]): r for r in record.get("removed", [])}
    added, removed = [], []
    removed_batches, forgotten_rows = [], 0
    seen = set()
    for entry in recorded:
        batch_id, digest = entry[0], entry[1]
        known_forgotten = entry[2] if len(entry) > 2 else 0
        seen.add((batch_id, digest))
        batch = live.get((batch_id, digest))
        if batch is not None:
            if forgotten_count(batch) < known_forgotten:
                raise StoreError(
                    f"store {path}: batch {batch_id!r} has {forgotten_count(batch)} forgotten "
                    f"rows, but the model recorded {known_forgotten}: it is not of this store's "
                    "history"
                )
            dropped = batch.get(FORGOTTEN_BEFORE, 0)
            if known_forgotten < dropped:
                raise _compacted_away(path, batch_id)
            since = np.asarray(forgotten_offsets(batch)[known_forgotten - dropped :], np.int64)
            if len(since):
                removed.append((batch, since))
                forgotten_rows += len(since)
            continue
        tombstone = tombstones.get((batch_id, digest))
        if tombstone is None or "rows_file" not in tombstone:
            raise StoreError(
                f"store {path}: batch {batch_id!r} the model learned from was removed and its "
                "rows are no longer on disk (a removed last batch, a compacted store, or a "
                "removal by an imgscale before tombstones kept rows files); train the model again"
            )
        dropped = tombstone.get(FORGOTTEN_BEFORE, 0)
        if known_forgotten < dropped:
            raise _compacted_away(path, batch_id)
        keep = np.ones(tombstone["stop"] - tombstone["start"], dtype=bool)
        keep[forgotten_offsets(tombstone)[: known_forgotten - dropped]] = False
        removed.append((tombstone, np.flatnonzero(keep)))
        removed_batches.append(batch_id)
    for key, batch in live.items():
        if key not in seen:
            offsets = live_offsets(batch)
            n = batch["stop"] - batch["start"]
            added.append((batch, np.arange(n) if offsets is None else offsets))
    batches = [[b["batch_id"], digest, forgotten_count(b)] for (_, digest), b in live.items()]
    return StoreChange(
        _changed(path, added),
        _changed(path, removed),
        [batch["batch_id"] for batch, _ in added],
        removed_batches,
        forgotten_rows,
        batches,
        sum(b["stop"] - b["start"] - len(forgotten_offsets(b)) for b in record["batches"]),
    )


def _compacted_away(path: Any, batch_id: str) -> StoreError:
    return StoreError(
        f"store {path}: rows of batch {batch_id!r} the model learned from were forgotten and "
        "then compacted away (`imgscale compact`), so they cannot be subtracted; train the "
        "model again"
    )


def _changed(path: Any, pieces: list[tuple[dict[str, Any], np.ndarray]]) -> ChangedRows:
    """Positions, labels and splits of ``offsets`` of each batch (live or tombstoned)."""
    positions, labels, splits = [], [], []
    for batch, offsets in pieces:
        where = f"store {path}: rows file of batch {batch['batch_id']!r}"
        table = read_checked_table(
            path / batch["rows_file"], batch.get("crc32c"), where, columns=["label", "split"]
        )
        if table.num_rows != batch["stop"] - batch["start"]:
            raise StoreError(
                f"{where} has {table.num_rows} rows; expected {batch['stop'] - batch['start']}"
            )
        table = table.take(pa.array(offsets, pa.int64()))
        positions.append(batch["start"] + offsets)
        labels.append(table.column("label").to_numpy().astype(np.int32, copy=False))
        splits.append(table.column("split").to_numpy(zero_copy_only=False).astype(str))
    if not pieces:
        return ChangedRows(np.empty(0, np.int64), np.empty(0, np.int32), np.empty(0, str))
    order = np.argsort(np.concatenate(positions), kind="stable")
    return ChangedRows(
        np.concatenate(positions)[order],
        np.concatenate(labels)[order],
        np.concatenate(splits)[order],
    )
