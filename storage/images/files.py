"""Image sources of one file per image: a folder (a class tree or flat) and a list file (CSV or
parquet rows naming each image's path, with an optional label and id)."""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa

from imgscale.storage.errors import StoreError
from imgscale.storage.fs import Location, is_url, read_table
from imgscale.storage.images.source_types import (
    EncodedImage,
    ImagePartition,
    ImageSource,
    Skip,
    as_text,
    chunks,
    file_at,
    is_image_name,
    is_text_or_integer,
)


@dataclass(frozen=True)
class FilePartition(ImagePartition):
    """Images that are files: ``files[i]`` (relative to ``root``, or absolute, or a URL) holds
    the image ``keys[i]`` of class ``labels[i]``."""

    keys: tuple[str, ...]
    root: Location
    files: tuple[str, ...]
    labels: tuple[str | None, ...]

    def read(self, skip: Skip | None) -> Iterator[EncodedImage]:
        for key, file, label in zip(self.keys, self.files, self.labels, strict=True):
            if skip is not None and skip(key):
                continue
            path = file_at(self.root, file)
            try:
                data = path.read_bytes()
            except OSError as exc:  # vanished since listing, unreadable, a folder now...
                reason = exc.strerror or str(exc) or type(exc).__name__
                yield EncodedImage(key, label, b"", problem=f"cannot read {path}: {reason}")
                continue
            yield EncodedImage(key, label, data)


def _source(
    url: str,
    kind: str,
    root: Location,
    entries: list[tuple[str, str, str | None]],
    labelled: bool,
) -> ImageSource:
    """A source of ``entries`` (key, file, label), cut into partitions in their order."""

    def split(
        images_per_partition: int, only: Sequence[bool] | None, _leave_out: frozenset[str]
    ) -> list[ImagePartition]:
        kept = entries if only is None else [e for e, k in zip(entries, only, strict=True) if k]
        return [
            FilePartition(
                keys=tuple(key for key, _, _ in chunk),
                root=root,
                files=tuple(file for _, file, _ in chunk),
                labels=tuple(label for _, _, label in chunk),
            )
            for chunk in chunks(kept, images_per_partition)
        ]

    return ImageSource(url, kind, labelled, len(entries), split)


def open_folder(url: str, root: Location, files: list[str]) -> ImageSource:
    """The images among ``files`` (sorted relative paths below ``root``): ROOT/<class>/<file...>
    labelled by the class folder, or all at ROOT and unlabelled."""
    images = [file for file in files if is_image_name(file)]
    nested = [file for file in images if "/" in file]
    top = [file for file in images if "/" not in file]
    if nested and top:
        raise StoreError(
            f"{url}: images both at the top ({len(top)}, e.g. {top[0]}) and in subfolders "
            f"({len(nested)}, e.g. {nested[0]}); expected ROOT/<class>/<file> or all at ROOT"
        )
    entries = [(file, file, file.split("/", 1)[0] if nested else None) for file in images]
    return _source(url, "folder", root, entries, labelled=bool(nested))


def open_list(
    url: str,
    file: Location,
    *,
    path_column: str,
    label_column: str,
    id_column: str,
) -> ImageSource:
    """A CSV or parquet list of image paths (relative ones relative to the list's folder);
    each image's key is its id if there is an id column, else its path as written."""
    table = _read_list(url, file, (path_column, label_column, id_column))
    if path_column not in table.column_names:
        raise StoreError(f"{url}: no column {path_column!r}; expected the images' paths there")
    if table.num_rows == 0:
        raise StoreError(f"{url}: the list is empty; expected one image path a row")
    paths = _column(url, table, path_column, _is_text, "text")
    labelled = label_column in table.column_names
    labels = [None] * len(paths)
    if labelled:
        values = _column(url, table, label_column, is_text_or_integer, "text or integers")
        labels = [as_text(value) for value in values]
    keys = paths
    if id_column in table.column_names:
        ids = _column(url, table, id_column, is_text_or_integer, "text or integers")
        keys = [as_text(value) for value in ids]
    for row, path in enumerate(paths):
        if not path:
            raise StoreError(f"{url}: row {row} has no {path_column!r}; expected an image path")
    _check_keys(url, keys, id_column if id_column in table.column_names else path_column)
    entries = list(zip(keys, paths, labels, strict=True))
    return _source(url, "list", file.parent, entries, labelled)


def _read_list(url: str, file: Location, columns: tuple[str, ...]) -> pa.Table:
    if file.name.lower().endswith(".parquet"):
        return read_table(file)
    import pyarrow.csv as csv

    # Every column is read as text (a path or id of digits stays as written); empty is null.
    options = csv.ConvertOptions(
        column_types=dict.fromkeys(columns, pa.string()), strings_can_be_null=True
    )
    try:
        source = io.BytesIO(file.read_bytes()) if is_url(file) else str(file)
        return csv.read_csv(source, convert_options=options)
    except (pa.ArrowInvalid, OSError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise StoreError(f"{url}: not a readable CSV list of images ({reason})") from None


def _column(url: str, table: pa.Table, name: str, accepts, expected: str) -> list:
    column = table.column(name)
    if not accepts(column.type):
        raise StoreError(f"{url}: column {name!r} is {column.type}, expected {expected}")
    return column.to_pylist()


def _check_keys(url: str, keys: list[str | None], column: str) -> None:
    """Every row has a key, and no key is on two rows: a store's ids are unique, non-empty."""
    seen: dict[str, int] = {}
    for row, key in enumerate(keys):
        if not key:
            raise StoreError(f"{url}: row {row} has no {column!r}; expected one on every row")
        if key in seen:
            raise StoreError(f"{url}: {column} {key!r} is on rows {seen[key]} and {row}")
        seen[key] = row


def _is_text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)
