"""Load a feature file into a store, streamed in row blocks and committed as one batch."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from imgscale.storage.errors import StoreError
from imgscale.storage.formats import FORMATS, open_source
from imgscale.storage.formats.base import Source
from imgscale.storage.layout import default_rows_per_chunk
from imgscale.storage.store import FeatureStore, create_store, open_store

# A small first file gets chunks of its size rounded up to this many rows.
SMALL_CHUNK_STEP = 4096

__all__ = ["FORMATS", "ingest_file"]


def ingest_file(
    src: str | Path,
    store_path: str | Path,
    *,
    batch_id: str | None = None,
    x_key: str | None = None,
    y_key: str | None = None,
    ids_key: str | None = None,
    labels_path: str | Path | None = None,
    split: str = "train",
    block_rows: int | None = None,
    class_names: Sequence[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> FeatureStore:
    """Append ``src`` to the store at ``store_path``, creating it (dim from the file) if missing.

    The whole file is one batch through one writer, so it commits entirely or not at all; a
    store this call created is removed again if the ingest fails. ``batch_id`` defaults to the
    file's name, size and mtime, so ingesting the same file twice is a no-op. ``block_rows``
    (default: the store's rows per chunk) bounds memory.
    """
    src = Path(src)
    store_path = Path(store_path)
    if not src.is_file():
        raise StoreError(f"{src}: no such file")
    source = open_source(src, x_key=x_key, y_key=y_key, ids_key=ids_key)
    labels = None
    try:
        if len(source.shape) != 2:
            raise StoreError(f"{src}: array of shape {source.shape}; expected 2-D features")
        if labels_path is not None:
            labels = open_source(Path(labels_path))
            if labels.shape != source.shape[:1]:
                raise StoreError(
                    f"{labels_path}: labels of shape {labels.shape}; expected "
                    f"({source.shape[0]},), one per row of {src}"
                )
        if batch_id is None:
            stat = src.stat()
            batch_id = f"{src.name}:{stat.st_size}:{stat.st_mtime_ns}"
        created = not _is_store(store_path)
        pre_existing_dir = store_path.is_dir()
        if created:
            store = create_store(
                store_path,
                source.shape[1],
                rows_per_chunk=_rows_per_chunk_for(source.shape),
                class_names=class_names,
                provenance={"source": str(src.resolve())},
            )
        else:
            store = open_store(store_path)
            if class_names:
                store.set_class_names(class_names)
        try:
            _stream(source, labels, store, batch_id, split, block_rows, progress)
        except BaseException:
            if created:
                shutil.rmtree(store_path, ignore_errors=True)
                if pre_existing_dir:
                    store_path.mkdir()
            raise
    finally:
        source.close()
        if labels is not None:
            labels.close()
    return store


def _is_store(path: Path) -> bool:
    # An empty directory counts as "missing" so callers may pre-create the target.
    return path.exists() and (not path.is_dir() or any(path.iterdir()))


def _stream(
    source: Source,
    labels: Source | None,
    store: FeatureStore,
    batch_id: str,
    split: str,
    block_rows: int | None,
    progress: Callable[[int, int], None] | None,
) -> None:
    block_rows = block_rows or store.rows_per_chunk
    total = source.shape[0]
    label_blocks = labels.blocks(block_rows) if labels is not None else None
    done = 0
    with store.writer(batch_id) as w:
        if w.already_committed:
            return
        for block in source.blocks(block_rows):
            y = next(label_blocks).X if label_blocks is not None else block.labels
            try:
                w.write(block.X, y, block.ids, split)
            except StoreError as e:
                rows = f"rows {done}–{done + len(block.X) - 1}"
                raise StoreError(f"{source.path} {rows}: {e}") from e
            done += len(block.X)
            if progress is not None:
                progress(done, total)


def _rows_per_chunk_for(shape: tuple[int, int]) -> int:
    """The default ~64 MiB chunk, or less for a small first file.

    zarr stores every chunk whole, so an uncompressed store of a few thousand rows would
    otherwise take a full 64 MiB chunk on disk.
    """
    rows = -(-max(shape[0], 1) // SMALL_CHUNK_STEP) * SMALL_CHUNK_STEP
    return min(default_rows_per_chunk(shape[1]), rows)
