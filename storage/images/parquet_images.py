"""Parquet files holding image bytes in a column (with optional label and id columns), one file
or a folder of them; read a row group at a time, so a worker's memory is one row group's.

A partition is a run of consecutive row groups, or a slice of the rows of one group larger than a
partition: ingest sizes its tasks by the descriptor's cost, and a file written with large row
groups (2,048 rows, say) would otherwise give a cheap descriptor a few long tasks, some workers
idle while the last ones run. A slice reads its whole row group and keeps its own rows: bytes
read more than once, few beside the work of decoding and describing them."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from imgscale.storage.errors import StoreError
from imgscale.storage.fs import Location, is_url
from imgscale.storage.images.source_types import (
    EncodedImage,
    ImagePartition,
    ImageSource,
    Skip,
    as_text,
    is_text_or_integer,
)


@dataclass(frozen=True)
class ParquetPartition(ImagePartition):
    """Consecutive row groups of one parquet file, or with ``group_rows`` the rows [start, stop)
    of its one row group. Without an id column an image's key is ``"<name>:<row>"``, ``name`` the
    file's path below the folder named (or its file name) and ``row`` its row in the file."""

    file: Location
    name: str
    row_groups: tuple[int, ...]
    rows: int
    image_column: str
    label_column: str | None
    id_column: str | None
    group_rows: tuple[int, int] | None = None

    @property
    def images(self) -> int:
        return self.rows

    @property
    def source_files(self) -> tuple[Location, ...]:
        return (self.file,)

    def read(self, skip: Skip | None) -> Iterator[EncodedImage]:
        with _opened(self.file) as parquet:
            sizes = [parquet.metadata.row_group(i).num_rows for i in range(self.row_groups[-1] + 1)]
            for group in self.row_groups:
                keys = self._keys(parquet, group, first_row=sum(sizes[:group]))
                start, stop = self.group_rows or (0, len(keys))
                wanted = [row for row in range(start, stop) if skip is None or not skip(keys[row])]
                if wanted:
                    yield from self._images(parquet, group, keys, wanted)

    def read_keys(self) -> tuple[str, ...]:
        """The partition's keys: from the file's footer alone without an id column, else its id
        column alone, a row group at a time (never the image bytes)."""
        with _opened(self.file) as parquet:
            sizes = [parquet.metadata.row_group(i).num_rows for i in range(self.row_groups[-1] + 1)]
            keys = [
                key
                for group in self.row_groups
                for key in self._keys(parquet, group, first_row=sum(sizes[:group]))
            ]
            start, stop = self.group_rows or (0, len(keys))
            return tuple(keys[start:stop])

    def _keys(self, parquet: pq.ParquetFile, group: int, first_row: int) -> list[str]:
        if self.id_column is None:
            rows = range(first_row, first_row + parquet.metadata.row_group(group).num_rows)
            return [f"{self.name}:{row}" for row in rows]
        ids = parquet.read_row_group(group, columns=[self.id_column]).column(0).to_pylist()
        keys = [as_text(value) for value in ids]
        if not all(keys):
            row = first_row + next(i for i, key in enumerate(keys) if not key)
            raise StoreError(f"{self.file}: row {row} has no {self.id_column!r}")
        return keys

    def _images(
        self, parquet: pq.ParquetFile, group: int, keys: list[str], wanted: list[int]
    ) -> Iterator[EncodedImage]:
        columns = [self.image_column] + ([self.label_column] if self.label_column else [])
        table = parquet.read_row_group(group, columns=columns)
        if len(wanted) < table.num_rows:
            table = table.take(wanted)
        images = _image_bytes(table.column(self.image_column))
        labels = (
            [as_text(value) for value in table.column(self.label_column).to_pylist()]
            if self.label_column
            else [None] * len(wanted)
        )
        for row, data, label in zip(wanted, images, labels, strict=True):
            if data is None:
                yield EncodedImage(keys[row], label, b"", problem=f"{self.image_column} is null")
            else:
                yield EncodedImage(keys[row], label, data)


def _image_bytes(column: pa.ChunkedArray) -> list[bytes | None]:
    """The bytes of each row: a binary column, or a struct's "bytes" field (Hugging Face's
    Image feature stores images as {bytes, path})."""
    if pa.types.is_struct(column.type):
        column = pa.chunked_array(
            [chunk.field("bytes") for chunk in column.chunks], column.type.field("bytes").type
        )
    return column.to_pylist()


@contextlib.contextmanager
def _opened(file: Location) -> Iterator[pq.ParquetFile]:
    """A parquet file opened for reading row groups on demand (ranged reads on object stores)."""
    if not is_url(file):
        with pq.ParquetFile(file) as parquet:
            yield parquet
        return
    with file.open("rb") as raw, pq.ParquetFile(raw) as parquet:
        yield parquet


def parquet_columns(url: str, file: Location) -> list[str]:
    """The column names of the parquet file ``file`` (named ``url``), from its footer."""
    with _readable(url), _opened(file) as parquet:
        return parquet.schema_arrow.names


@contextlib.contextmanager
def _readable(where: str) -> Iterator[None]:
    try:
        yield
    except (pa.ArrowInvalid, OSError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise StoreError(f"{where}: not a readable parquet file ({reason})") from None


def _is_binary(kind: pa.DataType) -> bool:
    return pa.types.is_binary(kind) or pa.types.is_large_binary(kind)


def _check_schema(where: str, schema: pa.Schema, image: str, *names: str | None) -> None:
    """The image column holds bytes, and the label and id columns (when present) text or
    integers."""
    kind = schema.field(image).type
    if not (_is_binary(kind) or (pa.types.is_struct(kind) and _struct_has_bytes(kind))):
        raise StoreError(f"{where}: column {image!r} is {kind}, expected image bytes (binary)")
    for name in names:
        if name is not None and not is_text_or_integer(schema.field(name).type):
            kind = schema.field(name).type
            raise StoreError(f"{where}: column {name!r} is {kind}, expected text or integers")


def _struct_has_bytes(kind: pa.StructType) -> bool:
    index = kind.get_field_index("bytes")
    return index >= 0 and _is_binary(kind.field(index).type)


def open_parquet_images(
    url: str,
    files: list[tuple[Location, str]],
    *,
    image_column: str,
    label_column: str,
    id_column: str,
) -> ImageSource:
    """Parquet ``files`` (each with the name its keys use) whose ``image_column`` holds image
    bytes; partitions are row groups, consecutive small ones of a file taken together."""
    parts: list[tuple[Location, str, list[int], str | None, str | None]] = []
    for file, name in files:
        where = f"{url} ({name})" if len(files) > 1 else url
        with _readable(where):
            with _opened(file) as parquet:
                schema = parquet.schema_arrow
                sizes = [
                    parquet.metadata.row_group(i).num_rows for i in range(parquet.num_row_groups)
                ]
        if image_column not in schema.names:
            raise StoreError(f"{where}: no column {image_column!r}; expected the image bytes there")
        label = label_column if label_column in schema.names else None
        key = id_column if id_column in schema.names else None
        _check_schema(where, schema, image_column, label, key)
        parts.append((file, name, sizes, label, key))
    labelled = {label is not None for _, _, _, label, _ in parts}
    if len(labelled) > 1:
        raise StoreError(f"{url}: column {label_column!r} is in some files, not all")
    images = sum(sum(sizes) for _, _, sizes, _, _ in parts)
    if images == 0:
        raise StoreError(f"{url}: no rows; expected one image a row")

    def split(
        images_per_partition: int, _only: None, leave_out: frozenset[str]
    ) -> list[ImagePartition]:
        return [
            ParquetPartition(
                keys=None,
                file=file,
                name=name,
                row_groups=groups,
                rows=sum(sizes[group] for group in groups) if rows is None else rows[1] - rows[0],
                image_column=image_column,
                label_column=label,
                id_column=key,
                group_rows=rows,
            )
            for file, name, sizes, label, key in parts
            if str(file) not in leave_out
            for groups, rows in _runs(sizes, images_per_partition)
        ]

    def estimated(leave_out: frozenset[str]) -> int:
        return sum(sum(sizes) for file, _, sizes, _, _ in parts if str(file) not in leave_out)

    files = tuple(file for file, _, _, _, _ in parts)
    return ImageSource(url, "parquet", labelled.pop(), images, split, files, estimated)


def _runs(
    sizes: list[int], images_per_partition: int
) -> list[tuple[tuple[int, ...], tuple[int, int] | None]]:
    """Row groups (given their sizes) cut into runs of consecutive groups, each run ended by
    the group that brings it to ``images_per_partition`` rows, as (groups, None); a group of
    more rows than that alone is cut into as many slices of near-equal rows as it needs, each
    as ((group,), (start, stop)). Empty groups are left out."""
    runs: list[tuple[tuple[int, ...], tuple[int, int] | None]] = []
    run: list[int] = []
    rows = 0
    for group, size in enumerate(sizes):
        if size == 0:
            continue
        if size > images_per_partition:
            if run:
                runs.append((tuple(run), None))
                run, rows = [], 0
            slices = -(-size // images_per_partition)
            bounds = [size * i // slices for i in range(slices + 1)]
            runs += [((group,), part) for part in itertools.pairwise(bounds)]
            continue
        run.append(group)
        rows += size
        if rows >= images_per_partition:
            runs.append((tuple(run), None))
            run, rows = [], 0
    if run:
        runs.append((tuple(run), None))
    return runs
