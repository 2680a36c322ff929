"""Forgetting single rows: a row-level tombstone, committed like a removed batch.

`forget_rows` takes rows out of a store's live rows without touching any row chunk or rows
file: the commit record lists, for each batch, the offsets of its forgotten rows in the order
they were forgotten (``"forgotten"``), and every read skips them as it skips the rows of a
removed batch (`storage.layout.live_mask`). Their bytes stay on disk until `imgscale compact`
rewrites the chunks that hold them; `imgscale info` counts them.

The order matters to models that follow the store (`imgscale update`): a model records how many
of each batch's rows were forgotten when it learned, and the rows forgotten since are the
offsets past that count, so they can be read and subtracted exactly.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imgscale.storage.errors import StoreError
from imgscale.storage.layout import (
    ROW_DIGEST_BYTES,
    SHA256,
    check_row_ranges,
    read_checked_table,
    read_record,
    row_digest,
    schema_version,
    short_digests,
    write_record,
)
from imgscale.storage.lock import writer_lock

FORGOTTEN = "forgotten"
# Rows of a batch forgotten and then dropped by compaction (`storage.compact`): gone from disk,
# still counted, so a model's recorded count of forgotten rows keeps its meaning.
FORGOTTEN_BEFORE = "forgotten_before"


def forgotten_offsets(batch: dict[str, Any]) -> list[int]:
    """Offsets (within ``batch``) of its forgotten rows, in the order they were forgotten."""
    return batch.get(FORGOTTEN, [])


def forgotten_count(batch: dict[str, Any]) -> int:
    """Rows of ``batch`` forgotten so far: those compaction has dropped (``forgotten_before``)
    and those still on disk under the row-level tombstone."""
    return batch.get(FORGOTTEN_BEFORE, 0) + len(forgotten_offsets(batch))


def live_offsets(batch: dict[str, Any]) -> np.ndarray | None:
    """Offsets of ``batch``'s rows that are not forgotten, or None when none is."""
    forgotten = forgotten_offsets(batch)
    if not forgotten:
        return None
    keep = np.ones(batch["stop"] - batch["start"], dtype=bool)
    keep[forgotten] = False
    return np.flatnonzero(keep)


def live_rows(batch: dict[str, Any]) -> int:
    """Rows of ``batch`` that are not forgotten."""
    return batch["stop"] - batch["start"] - len(forgotten_offsets(batch))


def forget_rows(
    store: Any,
    ids: Sequence[str] = (),
    *,
    sha256: Sequence[str] = (),
    reason: str = "",
) -> int:
    """Forget the live rows whose id is one of ``ids`` or whose content digest (hex) is one of
    ``sha256``, in one commit under the writer lock; returns the rows forgotten.

    Crash-safe as any commit: a process killed before the record is written leaves the store as
    it was, after it every read skips the rows. An id or digest that names no live row is
    refused by name and nothing changes (an id or digest already forgotten is named as such).
    """
    ids, digests = list(dict.fromkeys(ids)), list(dict.fromkeys(sha256))
    if not ids and not digests:
        raise StoreError(f"store {store.path}: no ids or sha256 digests given to forget")
    # A row carries the first 16 bytes of its sha256 (32 in a store written before): both are
    # compared as those 16 bytes (`short_digests`).
    wanted_digests = [row_digest(_digest_bytes(d, store.path)) for d in digests]
    with writer_lock(store.path):
        record = read_record(store.path)
        check_row_ranges(store.path, record)
        found_ids: set[str] = set()
        found_digests: set[bytes] = set()
        already: set[str] = set()
        already_digests: set[bytes] = set()
        forgotten = 0
        for batch in record["batches"]:
            table = _batch_table(store.path, batch, with_sha256=bool(wanted_digests))
            hit = pc.is_in(table.column("id"), value_set=pa.array(ids, pa.string()))
            hit = pc.fill_null(hit, False).to_numpy(zero_copy_only=False)
            if wanted_digests:
                if SHA256 in table.column_names:
                    by_digest = pc.is_in(
                        table.column(SHA256),
                        value_set=pa.array(wanted_digests, pa.binary(ROW_DIGEST_BYTES)),
                    )
                    by_digest = pc.fill_null(by_digest, False).to_numpy(zero_copy_only=False)
                    hit = hit | by_digest
            offsets = np.flatnonzero(hit)
            earlier = set(forgotten_offsets(batch))
            batch_ids = table.column("id")
            fresh = [int(o) for o in offsets if int(o) not in earlier]
            gone = [int(o) for o in offsets if int(o) in earlier]
            already.update(batch_ids[o].as_py() for o in gone)
            found_ids.update(batch_ids[o].as_py() for o in fresh)
            if wanted_digests and SHA256 in table.column_names:
                column = table.column(SHA256)
                found_digests.update(column.take(pa.array(fresh, pa.int64())).to_pylist())
                already_digests.update(column.take(pa.array(gone, pa.int64())).to_pylist())
            if fresh:
                batch[FORGOTTEN] = [*forgotten_offsets(batch), *fresh]
                forgotten += len(fresh)
        missing = [i for i in ids if i not in found_ids]
        if missing:
            state = "is already forgotten" if missing[0] in already else "names no live row"
            raise StoreError(
                f"store {store.path}: id {missing[0]!r} {state}"
                + (f" ({len(missing) - 1} more ids too)" if len(missing) > 1 else "")
                + "; nothing was forgotten"
            )
        missing_digests = [
            (d, b) for d, b in zip(digests, wanted_digests, strict=True) if b not in found_digests
        ]
        if missing_digests:
            (digest, short), more = missing_digests[0], len(missing_digests) - 1
            state = "is already forgotten" if short in already_digests else "names no live row"
            raise StoreError(
                f"store {store.path}: sha256 {digest} {state}"
                + (f" ({more} more digests too)" if more else "")
                + "; nothing was forgotten"
            )
        record.setdefault("forgets", []).append(
            {
                "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "rows": forgotten,
                "reason": reason,
            }
        )
        record["schema_version"] = schema_version(record)
        write_record(store.path, record)
    return forgotten


def _batch_table(path: Any, batch: dict[str, Any], with_sha256: bool) -> pa.Table:
    """A batch's ids (and digests, if it has them and they are wanted), checked and whole."""
    where = f"store {path}: rows file of batch {batch['batch_id']!r}"
    table = read_checked_table(path / batch["rows_file"], batch.get("crc32c"), where)
    if table.num_rows != batch["stop"] - batch["start"]:
        raise StoreError(
            f"{where} has {table.num_rows} rows; expected {batch['stop'] - batch['start']}"
        )
    if not (with_sha256 and SHA256 in table.column_names):
        return table.select(["id"])
    return pa.table({"id": table.column("id"), SHA256: short_digests(table.column(SHA256))})


def _digest_bytes(text: str, path: Any) -> bytes:
    try:
        digest = bytes.fromhex(text)
    except ValueError:
        digest = b""
    if len(digest) != 32:
        raise StoreError(
            f"store {path}: sha256 {text!r} is not 64 hexadecimal digits; nothing was forgotten"
        )
    return digest
