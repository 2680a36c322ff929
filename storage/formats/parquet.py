"""Parquet sources: one fixed-size-list float column of features plus optional label/id columns."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from imgscale.storage.errors import StoreError
from imgscale.storage.formats.base import Block, resolve_keys


class ParquetSource:
    """``x_key`` defaults to the first fixed_size_list column; ``y_key`` to "label" and
    ``ids_key`` to "id" when such columns exist. Read with ``iter_batches`` to bound memory."""

    extensions = (".parquet", ".pq")

    def __init__(
        self,
        path: Path,
        x_key: str | None = None,
        y_key: str | None = None,
        ids_key: str | None = None,
        **_keys: str | None,
    ) -> None:
        self.path = path
        try:
            self._file = pq.ParquetFile(path)
        except (OSError, pa.ArrowException) as e:
            raise StoreError(f"{path}: not a readable parquet file ({e})") from e
        schema = self._file.schema_arrow
        if x_key is None:
            lists = [f.name for f in schema if pa.types.is_fixed_size_list(f.type)]
            if not lists:
                raise StoreError(
                    f"{path}: no fixed_size_list column; expected one holding the feature vectors"
                )
            x_key = lists[0]
        y_key, ids_key = resolve_keys(
            path, schema.names, x_key, y_key, ids_key, ("label", "id"), "column"
        )
        x_type = schema.field(x_key).type
        if not pa.types.is_fixed_size_list(x_type):
            raise StoreError(
                f"{path}: column {x_key!r} has type {x_type}; expected fixed_size_list<float>"
            )
        if y_key is not None:
            y_type = schema.field(y_key).type
            if not (pa.types.is_integer(y_type) or _is_text(y_type)):
                raise StoreError(
                    f"{path}: label column {y_key!r} has type {y_type}; expected integers "
                    "(-1 = unlabelled) or strings (class names)"
                )
        if ids_key is not None and not _is_text(schema.field(ids_key).type):
            raise StoreError(
                f"{path}: id column {ids_key!r} has type {schema.field(ids_key).type}; "
                "expected strings"
            )
        self._keys = (x_key, y_key, ids_key)
        self.shape = (self._file.metadata.num_rows, x_type.list_size)

    def blocks(self, block_rows: int) -> Iterator[Block]:
        columns = [k for k in self._keys if k is not None]
        start = 0
        for batch in self._file.iter_batches(batch_size=block_rows, columns=columns):
            x_key, y_key, ids_key = self._keys
            where = f"{self.path}: rows {start}–{start + batch.num_rows - 1}"
            for key in columns:
                if batch.column(key).null_count:
                    raise StoreError(f"{where}: column {key!r} has nulls; expected none")
            X = batch.column(x_key).flatten().to_numpy(zero_copy_only=False)
            yield Block(
                X.reshape(batch.num_rows, self.shape[1]),
                None if y_key is None else batch.column(y_key).to_numpy(zero_copy_only=False),
                None if ids_key is None else np.asarray(batch.column(ids_key).to_pylist()),
            )
            start += batch.num_rows

    def close(self) -> None:
        self._file.close()


def _is_text(type_: pa.DataType) -> bool:
    return pa.types.is_string(type_) or pa.types.is_large_string(type_)
