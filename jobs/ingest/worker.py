"""What a worker does with a partition of images: one loop reads, hashes and decodes each image
(`read_and_decode`), refusing by name the image a step fails on, and its callers describe what it
decoded: an ingest's new images into rows (`describe_partition`, encoded if the store keeps codes:
`describe_and_encode`), a PQ codebook's sample into signatures (`signatures_of_sample`), and a
vocabulary's sample into local descriptors (``jobs.fit_vocabulary``)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from imgscale.jobs.ingest.known import EMPTY_SHA256, Known
from imgscale.storage import (
    EncodedImage,
    ImagePartition,
    ImageRejected,
    ImageRequest,
    decode_image,
    read_partition,
)

if TYPE_CHECKING:
    from imgscale.jobs.features import Features
    from imgscale.jobs.ingest.sample import SampledPartition
    from imgscale.pipeline.pq import PQCodec


@dataclass(frozen=True)
class ReadImage:
    """One image of a partition as `read_and_decode` found it: its ``pixels`` (one array a
    request) when decoded, else why not in one line (``problem``); ``digest``, the sha256 of
    its bytes (`EMPTY_SHA256` when they could not be read)."""

    image: EncodedImage
    digest: bytes
    pixels: list[np.ndarray] | None
    problem: str | None


def read_and_decode(
    partition: ImagePartition,
    requests: Sequence[ImageRequest],
    *,
    skip: Callable[[str], bool] | None = None,
    limit: int | None = None,
    refuse: Callable[[bytes], str | None] | None = None,
) -> Iterator[ReadImage]:
    """Each image of ``partition`` whose key ``skip`` does not skip, read, hashed, and decoded
    for ``requests`` unless ``refuse`` (given its sha256) says why not (bytes already stored),
    until ``limit`` images have been decoded. An image that cannot be read or decoded is
    yielded with its problem (`refusal`); a failure that is not about one image raises."""
    decoded = 0
    for image in read_partition(partition, skip=skip):
        if limit is not None and decoded >= limit:
            break
        if image.problem is not None:
            yield ReadImage(image, EMPTY_SHA256, None, image.problem)
            continue
        digest = hashlib.sha256(image.data).digest()
        problem = refuse(digest) if refuse is not None else None
        pixels = None
        if problem is None:
            try:
                pixels = decode_image(image.data, requests)
            except Exception as exc:
                problem = refusal(exc)
        if pixels is not None:
            decoded += 1
        yield ReadImage(image, digest, pixels, problem)


@dataclass
class Described:
    """One partition's outcome, returned by a task: rows for the images described, the images
    refused (key, sha256, reason), and the partition's `ImagePartition.source_files`."""

    keys: list[str] = field(default_factory=list)
    labels: list[str | None] = field(default_factory=list)
    digests: list[bytes] = field(default_factory=list)
    rows: np.ndarray | None = None
    refused: list[tuple[str, bytes, str]] = field(default_factory=list)
    images_seen: int = 0
    source_files: tuple[str, ...] = ()


def describe_partition(features: Features, known: Known, partition: ImagePartition) -> Described:
    """Read, hash, decode and describe one partition's new images (runs on a worker). Whatever
    goes wrong with one image refuses that image alone (`refusal`)."""
    out = Described(source_files=tuple(map(str, partition.source_files)))

    def stored(digest: bytes) -> str | None:
        holder = known.id_of(digest)
        return None if holder is None else f"same bytes as {holder!r}, already stored"

    accepted, decoded = [], []
    for read in read_and_decode(partition, features.requests, skip=known.has_key, refuse=stored):
        out.images_seen += 1
        key = known.id_of_key(read.image.key)
        if read.pixels is None:
            out.refused.append((key, read.digest, read.problem))
            continue
        decoded.append(read.pixels)
        accepted.append((key, read.image, read.digest))
    rows, problems = describe_each(features, decoded)
    for (key, image, digest), problem in zip(accepted, problems, strict=True):
        if problem is not None:
            out.refused.append((key, digest, problem))
            continue
        out.keys.append(key)
        out.labels.append(image.label)
        out.digests.append(digest)
    out.rows = rows[[problem is None for problem in problems]]
    return out


def refusal(exc: Exception) -> str:
    """Why one image is refused, in one line, for an exception raised on its bytes or pixels; the
    exception itself when it is not about one image: memory ran out, or the system failed (an
    OSError with an errno: a full disk, a lost mount), which stops the run."""
    if isinstance(exc, MemoryError) or (isinstance(exc, OSError) and exc.errno is not None):
        raise exc
    if isinstance(exc, ImageRejected):
        return str(exc)
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def describe_each(
    features: Features, decoded: list[list[np.ndarray]]
) -> tuple[np.ndarray, list[str | None]]:
    """Rows for ``decoded`` images and, for each, why it has none (None when it has one). The
    images are described together; only when that raises is each described alone, so that the
    image a descriptor fails on is refused and the others kept. A row holding NaN or inf is
    refused too: no store takes it, and it would fail every later commit of its batch."""
    try:
        rows = features.describe(decoded)
        problems: list[str | None] = [None] * len(decoded)
    except Exception as exc:
        refusal(exc)  # raises when it is not about the images
        rows = np.full((len(decoded), features.dim), np.nan, np.float32)
        problems = []
        for i, image in enumerate(decoded):
            try:
                rows[i] = features.describe([image])[0]
                problems.append(None)
            except Exception as exc:
                problems.append(refusal(exc))
    finite = np.isfinite(rows)
    for i in np.flatnonzero(~finite.all(axis=1)):
        if problems[i] is None:
            bad = features.dim - int(finite[i].sum())
            problems[i] = f"descriptor not finite: {bad} of {features.dim} values NaN or inf"
    return rows, problems


def describe_and_encode(
    features: Features, known: Known, codec: PQCodec | None, partition: ImagePartition
) -> Described:
    """`describe_partition`, the rows then replaced by ``codec``'s codes of them if given (runs
    on a worker: the float rows never leave it)."""
    out = describe_partition(features, known, partition)
    if codec is not None:
        out.rows = codec.encode(out.rows)
    return out


def signatures_of_sample(features: Features, item: SampledPartition) -> np.ndarray:
    """Float rows of a partition's sampled images that decode and describe (runs on a worker:
    the signatures a PQ codebook is trained on)."""
    decoded = [
        read.pixels
        for read in read_and_decode(
            item.partition, features.requests, skip=item.skip, limit=item.limit
        )
        if read.pixels is not None
    ]
    rows, problems = describe_each(features, decoded)
    return rows[[problem is None for problem in problems]]
