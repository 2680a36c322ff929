"""WebDataset tar shards: each sample is the run of consecutive members sharing a key
(``dir/0001.jpg``, ``dir/0001.cls``, ``dir/0001.json`` → key ``dir/0001``), read as a stream so a
worker holds one member at a time, whatever the shard's size and wherever it is stored."""

from __future__ import annotations

import glob
import json
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from imgscale.storage.errors import StoreError
from imgscale.storage.fs import Location, absolute, is_url, location
from imgscale.storage.images.braces import expand_braces, has_braces
from imgscale.storage.images.source_types import (
    IMAGE_EXTENSIONS,
    EncodedImage,
    ImagePartition,
    ImageSource,
    Skip,
    as_text,
)

# WebDataset's split of a member name: the key runs to the first dot of the file name.
_KEY_AND_EXTENSION = re.compile(r"((?:.*/)?[^./][^.]*)\.(.+)")
_GLOB = re.compile(r"[*?[]")


@dataclass(frozen=True)
class ShardPartition(ImagePartition):
    """Tar shards read whole, one after the other, by one task."""

    shards: tuple[Location, ...]

    @property
    def source_files(self) -> tuple[Location, ...]:
        return self.shards

    def read(self, skip: Skip | None) -> Iterator[EncodedImage]:
        for shard in self.shards:
            try:
                with shard.open("rb") as raw, tarfile.open(fileobj=raw, mode="r|*") as tar:
                    yield from _samples(tar, skip)
            except (OSError, tarfile.TarError) as exc:
                raise StoreError(f"{shard}: not a readable tar shard ({exc})") from None


class _Sample:
    """The members of one key seen so far: the first image, and a label from .cls or .json."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.image: bytes | None = None
        self.problem: str | None = None
        self.cls: str | None = None
        self.json: str | None = None

    def encoded(self) -> EncodedImage | None:
        if self.image is None and self.problem is None:
            return None  # a sample without an image (captions only, say) is no image
        label = self.cls if self.cls is not None else self.json
        return EncodedImage(self.key, label, self.image or b"", self.problem)


def _samples(tar: tarfile.TarFile, skip: Skip | None) -> Iterator[EncodedImage]:
    sample: _Sample | None = None
    skipping = False
    for member in tar:
        split = _KEY_AND_EXTENSION.fullmatch(member.name.removeprefix("./"))
        if not member.isfile() or split is None:
            continue
        key, extension = split.group(1), split.group(2).lower()
        if sample is None or key != sample.key:
            if sample is not None and (image := sample.encoded()) is not None:
                yield image
            sample, skipping = _Sample(key), skip is not None and skip(key)
        if skipping:
            continue  # the stream passes over the member's bytes without keeping them
        is_image = f".{extension}" in IMAGE_EXTENSIONS and sample.image is None
        if not (is_image or extension in ("cls", "json")):
            continue
        try:
            data = tar.extractfile(member).read()
        except (OSError, tarfile.TarError) as exc:
            # The shard ends inside this member: nothing after it can be read.
            sample.problem = f"unreadable tar member {member.name} ({exc})"
            break
        if is_image:
            sample.image = data
        elif extension == "cls":
            sample.cls = _cls_label(data)
        else:
            sample.json = _json_label(data)
    if sample is not None and (image := sample.encoded()) is not None:
        yield image


def _cls_label(data: bytes) -> str | None:
    """A .cls member's text, or None when it is not text."""
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        return None
    return text if text and text.isprintable() else None


def _json_label(data: bytes) -> str | None:
    """A .json member's "label" (or "cls") as a class name, or None."""
    try:
        record = json.loads(data)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    return as_text(record.get("label", record.get("cls")))


def names_shards(url: str) -> bool:
    """Whether ``url`` names tar shards: a .tar file, a glob or a brace pattern."""
    return url.lower().endswith(".tar") or bool(_GLOB.search(url)) or has_braces(url)


def open_shards(url: str) -> ImageSource:
    """Tar shards named by a path, a glob or a brace pattern, in the order the pattern gives."""
    named: dict[Location, None] = {}  # in order, once each
    for name in expand_braces(url):
        named.update(dict.fromkeys(_matches(name) if _GLOB.search(name) else [_shard(name)]))
    shards = list(named)
    if not shards:
        raise StoreError(f"{url}: no tar shards match; expected files ending in .tar")
    for shard in shards:
        if not shard.name.lower().endswith(".tar"):
            raise StoreError(f"{url}: {shard} is not a .tar shard")
    missing = _missing(shards)
    if missing:
        raise StoreError(
            f"{url}: {missing[0]} does not exist ({len(missing)} of {len(shards)} shards missing)"
        )

    estimate = _Estimate()

    def split(
        images_per_partition: int, _only: None, leave_out: frozenset[str]
    ) -> list[ImagePartition]:
        kept = [shard for shard in shards if str(shard) not in leave_out]
        estimates = estimate.each(kept)
        if estimates is None:
            return [ShardPartition(keys=None, shards=(shard,)) for shard in kept]
        return [
            ShardPartition(keys=None, shards=run) for run in _runs(estimates, images_per_partition)
        ]

    def estimated(leave_out: frozenset[str]) -> int | None:
        estimates = estimate.each([shard for shard in shards if str(shard) not in leave_out])
        return None if estimates is None else sum(n for _, n in estimates)

    return ImageSource(url, "tar", None, None, split, tuple(shards), estimated)


class _Estimate:
    """The images of each local shard, estimated from its size at the images a byte of the
    first shard asked about (counted from its member headers alone: `images_in_shard`): shards
    of one dataset hold images of similar sizes, and a shard's images are known only when it is
    read through. None for shards on an object store (a size would cost a request a shard), or
    when the first shard shows no image."""

    def __init__(self) -> None:
        self._per_byte: float | None = None

    def each(self, shards: list[Location]) -> list[tuple[Location, int]] | None:
        if not shards:
            return []
        if is_url(shards[0]):
            return None
        sizes = [shard.stat().st_size for shard in shards]
        if self._per_byte is None:
            self._per_byte = images_in_shard(shards[0]) / max(1, sizes[0])
        if not self._per_byte:
            return None
        return [
            (shard, max(1, round(size * self._per_byte)))
            for shard, size in zip(shards, sizes, strict=True)
        ]


def images_in_shard(shard: Location) -> int:
    """The samples with an image of the tar ``shard``, from its member headers alone (the
    reader seeks past each member's bytes); those before the first unreadable header of a
    damaged shard, which reading it will refuse by name."""
    keys = set()
    try:
        with shard.open("rb") as raw, tarfile.open(fileobj=raw, mode="r:*") as tar:
            for member in tar:
                split = _KEY_AND_EXTENSION.fullmatch(member.name.removeprefix("./"))
                if member.isfile() and split and f".{split.group(2).lower()}" in IMAGE_EXTENSIONS:
                    keys.add(split.group(1))
    except (OSError, tarfile.TarError):
        pass
    return len(keys)


def _runs(estimates: list[tuple[Location, int]], images: int) -> list[tuple[Location, ...]]:
    """Consecutive shards (with their estimated images) in runs of at most ``images`` images,
    a shard holding more being a run alone."""
    runs: list[tuple[Location, ...]] = []
    run: list[Location] = []
    held = 0
    for shard, n in estimates:
        if run and held + n > images:
            runs.append(tuple(run))
            run, held = [], 0
        run.append(shard)
        held += n
    if run:
        runs.append(tuple(run))
    return runs


def _matches(pattern: str) -> list[Location]:
    target = location(pattern)
    if is_url(target):
        options = dict(target.storage_options)
        found = target.fs.glob(target.path)
        return [location(target.fs.unstrip_protocol(path), options) for path in sorted(found)]
    return [Path(path).absolute() for path in sorted(glob.glob(pattern))]


def _shard(name: str) -> Location:
    return absolute(location(name))  # workers do not share the client's working folder


def _missing(shards: list[Location]) -> list[Location]:
    """The shards that do not exist; on an object store one listing per folder, not one
    request per shard."""
    if not is_url(shards[0]):
        return [shard for shard in shards if not shard.is_file()]
    listed: dict[str, set[str]] = {}
    missing = []
    for shard in shards:
        folder = shard.parent.path
        if folder not in listed:
            try:
                listed[folder] = set(shard.fs.ls(folder, detail=False))
            except FileNotFoundError:
                listed[folder] = set()
        if shard.path not in listed[folder]:
            missing.append(shard)
    return missing
