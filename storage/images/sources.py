"""Opening an image source: what a user names is recognised as a folder, a list file, tar
shards or parquet of image bytes, on a local disk or an object store; a worker reads a partition.

A URL (``s3://bucket/prefix/``) is reached through `imgscale.storage.fs.location`, so the
storage options of the enclosing `use_storage_options` travel inside each partition to the
workers, as a store's path does; credentials come from each process's environment.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from upath import UPath

from imgscale.storage.errors import StoreError
from imgscale.storage.fs import absolute, access_checked, location
from imgscale.storage.images.files import open_folder, open_list
from imgscale.storage.images.parquet_images import open_parquet_images, parquet_columns
from imgscale.storage.images.shards import names_shards, open_shards
from imgscale.storage.images.source_types import (
    IMAGE_EXTENSIONS,
    EncodedImage,
    ImagePartition,
    ImageSource,
    Skip,
    files_under,
    is_image_name,
)


def open_image_source(
    spec: str | os.PathLike,
    *,
    image_column: str = "image",
    label_column: str = "label",
    id_column: str = "id",
    path_column: str = "path",
) -> ImageSource:
    """The images ``spec`` names, listed without reading any image:

    - a folder: ROOT/<class>/<file...> (labelled by the class folder) or all images at ROOT
      (unlabelled); hidden files and folders are left out;
    - ``*.tar``, a glob or a brace pattern (``shards-{0000..0099}.tar``): WebDataset shards;
    - ``*.parquet`` (a file, or a folder of them) with an ``image_column`` of bytes: images
      in parquet; with a ``path_column`` instead, or ``*.csv``: a list file of image paths.

    Raises StoreError, in one line naming ``spec``, when nothing or nothing usable is there
    (or when the object store refuses access: `fs.access_checked`).
    """
    url = str(spec) if isinstance(spec, UPath) else os.fspath(spec)
    with access_checked(location(url)):
        return _open_image_source(
            url, image_column=image_column, label_column=label_column, id_column=id_column,
            path_column=path_column,
        )  # fmt: skip


def _open_image_source(
    url: str, *, image_column: str, label_column: str, id_column: str, path_column: str
) -> ImageSource:
    if names_shards(url):
        return open_shards(url)
    target = absolute(location(url))
    if not target.exists():
        raise StoreError(f"{url}: no such file or folder")
    columns = {"image_column": image_column, "label_column": label_column, "id_column": id_column}
    if target.is_dir():
        files = files_under(target)
        if any(is_image_name(file) for file in files):
            return open_folder(url, target, files)
        tables = [file for file in files if file.lower().endswith(".parquet")]
        if tables:
            return open_parquet_images(url, [(target / file, file) for file in tables], **columns)
        extensions = ", ".join(sorted(IMAGE_EXTENSIONS))
        shards = sorted(file for file in files if file.lower().endswith(".tar"))
        if shards:
            raise StoreError(
                f"{url}: a folder of {len(shards)} tar shards ({shards[0]}...); name them with a "
                f"pattern: '{target / '*.tar'}' or a brace range, e.g. shards-{{0000..0099}}.tar"
            )
        raise StoreError(f"{url}: no images found; expected image files ({extensions}) or parquet")
    name = target.name.lower()
    if name.endswith(".parquet"):
        found = parquet_columns(url, target)
        if image_column in found:
            return open_parquet_images(url, [(target, target.name)], **columns)
        if path_column not in found:
            raise StoreError(
                f"{url}: neither column {image_column!r} (image bytes) nor {path_column!r} "
                f"(image paths) is there"
            )
    elif not name.endswith(".csv"):
        raise StoreError(
            f"{url}: not an image source; expected a folder, .tar shards, a .parquet file of "
            f"image bytes, or a .csv or .parquet list of image paths"
        )
    return open_list(
        url, target, path_column=path_column, label_column=label_column, id_column=id_column
    )


def read_partition(partition: ImagePartition, skip: Skip | None = None) -> Iterator[EncodedImage]:
    """The partition's images in a stable order (on a worker). An image whose key ``skip``
    accepts is not read; an image that cannot be read comes with its ``problem`` set."""
    return partition.read(skip)
