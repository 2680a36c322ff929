"""What every image source hands out: an `ImageSource` listed on the client, `ImagePartition`s
(one Dask task each, small and without image bytes) and the `EncodedImage`s a worker reads."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pyarrow as pa

from imgscale.storage.errors import StoreError
from imgscale.storage.fs import Location, is_url, location

# File name endings of the images a folder, a list file or a tar shard holds (case-insensitive).
IMAGE_EXTENSIONS = frozenset({".bmp", ".gif", ".jpeg", ".jpg", ".png", ".tif", ".tiff", ".webp"})

Skip = Callable[[str], bool]


@dataclass(frozen=True)
class EncodedImage:
    """One image as its source holds it.

    ``key`` is its id in a store (a folder's relative path, a list file's path or id, a tar
    shard's WebDataset key, a parquet id or ``"<file>:<row>"``); ``label`` its class name or
    None; ``data`` the encoded bytes, untouched. ``problem`` says in one line why the bytes
    could not be read (``data`` is then empty).
    """

    key: str
    label: str | None
    data: bytes
    problem: str | None = None


@dataclass(frozen=True)
class ImagePartition:
    """What one Dask task reads: where the images are, never their bytes. ``keys`` are the
    partition's image keys when listing knows them (folders, list files), else None."""

    keys: tuple[str, ...] | None

    @property
    def images(self) -> int | None:
        """How many images the partition holds, when listing knows (None for a tar shard)."""
        return None if self.keys is None else len(self.keys)

    def read(self, skip: Skip | None) -> Iterator[EncodedImage]:
        """The partition's images in a stable order, those whose key ``skip`` accepts unread."""
        raise NotImplementedError

    @property
    def source_files(self) -> tuple[Location, ...]:
        """The files of many images the partition reads from (a tar shard, a parquet file): an
        ingest keeps those it has committed whole, and leaves them out of the next ingest while
        unchanged. None for a partition of image files (a folder's listing keeps those)."""
        return ()

    def read_keys(self) -> tuple[str, ...] | None:
        """The partition's keys in reading order, without reading an image's bytes: the keys
        listed, or those a parquet file's id column gives; None when only reading the images
        tells (a tar shard)."""
        return self.keys


@dataclass(frozen=True)
class ImageSource:
    """Images a user named (``url``), listed on the client.

    ``kind`` is "folder", "list", "tar" or "parquet"; ``labelled`` whether images carry labels
    (None when only reading tells: tar shards); ``images`` how many there are when listing
    knows (None for tar shards); ``source_files`` the files of many images it reads from (tar
    shards, parquet files; none for images that are files).
    """

    url: str
    kind: str
    labelled: bool | None
    images: int | None
    _split: Callable[[int, Sequence[bool] | None, frozenset[str]], list[ImagePartition]] = field(
        repr=False, compare=False
    )
    source_files: tuple[Location, ...] = ()
    _estimate: Callable[[frozenset[str]], int | None] | None = field(
        default=None, repr=False, compare=False
    )

    def estimated_images(self, leave_out: frozenset[str] = frozenset()) -> int | None:
        """How many images the partitions leaving out ``leave_out`` hold: exactly when listing
        knows, estimated for local tar shards (`shards.estimated_images`), else None."""
        return self.images if self._estimate is None else self._estimate(leave_out)

    def partitions(
        self,
        images_per_partition: int = 256,
        only: Sequence[bool] | None = None,
        leave_out: frozenset[str] = frozenset(),
    ) -> list[ImagePartition]:
        """The source cut into partitions of about ``images_per_partition`` images (consecutive
        local tar shards smaller than that are read together, by their estimated images, and a
        larger shard is one partition; a parquet row group larger than a partition is read in
        slices of its rows). ``only`` says
        of each image, in listing order, whether the partitions hold it (sources that list
        their keys: a folder, a list file), so that a grown folder's new images make their own
        partitions. ``leave_out`` names ``source_files`` no partition reads (an ingest
        committed them whole before)."""
        if images_per_partition < 1:
            raise ValueError(f"images_per_partition={images_per_partition}: expected ≥ 1")
        if only is not None and self.kind not in ("folder", "list"):
            raise ValueError(f"{self.url}: only is for sources that list keys, not {self.kind}")
        if only is not None and len(only) != self.images:
            raise ValueError(f"only: {len(only)} flags for {self.images} images")
        return self._split(images_per_partition, only, leave_out)


def is_image_name(name: str) -> bool:
    return PurePosixPath(name).suffix.lower() in IMAGE_EXTENSIONS


def is_hidden(relative: str) -> bool:
    """Whether a relative posix path is hidden (a part starts with a dot)."""
    return any(part.startswith(".") for part in relative.split("/"))


def as_text(value: object) -> str | None:
    """A label or id as text: text as it is, integers as their decimal string, else None."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def is_text_or_integer(kind: pa.DataType) -> bool:
    """Whether a column of type ``kind`` can hold labels or ids (dictionary-encoded too)."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_integer(kind)


def file_at(root: Location, entry: str) -> Location:
    """The file ``entry`` names: a URL or an absolute local path as it is (a URL on ``root``'s
    object store with its storage options), anything else relative to the folder ``root``."""
    if is_url(entry):
        return location(entry, dict(root.storage_options) if is_url(root) else {})
    if os.path.isabs(entry):
        return Path(entry)
    return root / entry


def files_under(root: Location) -> list[str]:
    """Every file below the folder ``root`` that is not hidden, as sorted relative posix paths.
    Symbolic links to folders are followed as those to files are; a link to a folder holding it
    (a loop) raises StoreError naming it."""
    if is_url(root):
        base = root.path.rstrip("/") + "/"
        found = (path.removeprefix(base) for path in root.fs.find(root.path))
        return sorted(path for path in found if not is_hidden(path))
    files = []
    for folder, subfolders, names in os.walk(root, followlinks=True):
        subfolders[:] = [name for name in subfolders if not name.startswith(".")]
        _refuse_loops(Path(root), Path(folder), subfolders)
        prefix = Path(folder).relative_to(root).as_posix()
        prefix = "" if prefix == "." else prefix + "/"
        files.extend(prefix + name for name in names if not name.startswith("."))
    return sorted(files)


def _refuse_loops(root: Path, folder: Path, subfolders: list[str]) -> None:
    """StoreError if a link among ``subfolders`` of ``folder`` leads to a folder it was reached
    through (from ``root``): following it would list the same files forever."""
    walked = [folder, *folder.relative_to(root).parents]
    reached_through = {os.path.realpath(root / part) for part in walked[1:]}
    reached_through.add(os.path.realpath(folder))
    for name in subfolders:
        link = folder / name
        if link.is_symlink() and os.path.realpath(link) in reached_through:
            raise StoreError(
                f"{link}: a symbolic link to {os.path.realpath(link)}, a folder it is reached "
                "through (a loop); remove the link or name a folder without one"
            )


def chunks(items: list, size: int) -> list[list]:
    return [items[start : start + size] for start in range(0, len(items), size)]
