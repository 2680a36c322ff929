"""``imgscale fit-features SOURCE VOCAB.model --features bow|fisher``: a vocabulary of local
descriptors, learned on the cluster from a sample of a source's images.

The client lists the source and draws the sample: with listed keys (a folder, a list file) N
keys at random (seeded); without, the first images of every partition, so the sample spans the
whole source: N shared in proportion to the partitions' sizes where listing knows them (parquet
row groups), so it holds exactly N images, else ⌈N / partitions⌉ of each (tar shards). Each
task reads, decodes and describes one partition's sampled images
(`BagOfWords.local_descriptors`, `FisherVector.local_descriptors`) and keeps the local
descriptors on its worker as the task's result: they never reach the client.
Every pass of the fit (`pipeline.describe.vocabulary`: PCA, each k-means and each EM iteration)
then maps a statistics kernel over those results, one task per partition, and adds the small
per-partition sums on the client. Images that cannot be decoded are counted and left out.

With ``auto_size`` the working size (the side of the square images described) is chosen from
the sample before any is described: the median shorter side of its images, within bounds, so a
vocabulary of 250-pixel photos describes them near their own size rather than at a fixed one.
"""

from __future__ import annotations

import io
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from distributed import Client, Future, as_completed
from PIL import Image, UnidentifiedImageError
from sklearn.base import BaseEstimator

from imgscale.jobs.models import save
from imgscale.pipeline.describe import BagOfWords, FisherVector
from imgscale.storage import (
    ImagePartition,
    ImageRejected,
    ImageRequest,
    decode_image,
    open_image_source,
    read_partition,
)

IMAGES_PER_PARTITION = 64
# The bounds of ``--image-size auto`` (fit-features --help says what they were measured on).
AUTO_IMAGE_SIZE = (64, 256)


@dataclass(frozen=True)
class SampledPartition:
    """One task's share of the sample: the partition, and which of its images to describe
    (``keys``, when listing gave them) or how many of its first images (``limit``)."""

    partition: ImagePartition
    keys: frozenset[str] | None
    limit: int | None

    @property
    def asked(self) -> int:
        """The images this share asks for (fewer are read from a shorter partition)."""
        return len(self.keys) if self.keys is not None else int(self.limit or 0)


@dataclass
class ClusterChunks:
    """Local descriptors held on the workers, one task result per partition (the
    `DescriptorChunks` of ``pipeline.describe.vocabulary``)."""

    client: Client
    futures: list[Future]

    def map(self, kernel: Callable, *shared: object) -> list:
        """``[kernel(chunk, *shared) ...]`` as one task per chunk, where the chunk is; the shared
        arguments (centres, a GMM) are sent once to each worker."""
        sent = self.client.scatter(list(shared), broadcast=True, hash=False)
        return self.client.gather(
            [self.client.submit(kernel, chunk, *sent, pure=False) for chunk in self.futures]
        )


def vocabulary_of(kind: str, **params: Any) -> BaseEstimator:
    """The unfitted vocabulary ``--features bow`` or ``--features fisher`` names."""
    classes = {"bow": BagOfWords, "fisher": FisherVector}
    if kind not in classes:
        raise ValueError(f"--features {kind!r}: expected bow or fisher")
    vocabulary = classes[kind](**params)
    vocabulary.check_params()
    return vocabulary


def sample_partitions(
    source: str,
    sample: int,
    seed: int,
    source_options: dict[str, str] | None = None,
    images_per_partition: int = IMAGES_PER_PARTITION,
) -> list[SampledPartition]:
    """The source's partitions holding the sample of ``sample`` images (module docstring)."""
    if sample < 1:
        raise ValueError(f"--sample {sample}: expected at least 1 image")
    images = open_image_source(source, **(source_options or {}))
    # A tar shard a partition, so that the sample takes images from every shard.
    partitions = images.partitions(1 if images.kind == "tar" else images_per_partition)
    if not partitions:
        raise ValueError(f"{source}: no images to learn a vocabulary from")
    if any(p.keys is None for p in partitions):
        sizes = [p.images for p in partitions]
        if None in sizes:
            limit = math.ceil(sample / len(partitions))
            return [SampledPartition(p, None, limit) for p in partitions]
        limits = _shares(sample, sizes)
        return [SampledPartition(p, None, n) for p, n in zip(partitions, limits, strict=True) if n]
    keys = [k for p in partitions for k in p.keys]
    rng = np.random.default_rng(seed)
    chosen = {keys[i] for i in rng.choice(len(keys), min(sample, len(keys)), replace=False)}
    sampled = [
        SampledPartition(p, frozenset(chosen.intersection(p.keys)), None) for p in partitions
    ]
    return [s for s in sampled if s.keys]


def _shares(sample: int, sizes: list[int]) -> list[int]:
    """min(sample, Σ sizes) images split over partitions of ``sizes`` in proportion to their
    size (largest remainders take the rest), so the sample holds exactly that many."""
    total = sum(sizes)
    n = min(sample, total)
    shares = [n * size // total for size in sizes]
    by_remainder = sorted(range(len(sizes)), key=lambda i: -(n * sizes[i] % total))
    for i in by_remainder[: n - sum(shares)]:
        shares[i] += 1
    return shares


def _skip(item: SampledPartition) -> Callable[[str], bool] | None:
    """`read_partition`'s ``skip``: every key outside the sample, when the sample has keys."""
    return None if item.keys is None else (lambda key: key not in item.keys)


def shorter_sides(item: SampledPartition) -> list[int]:
    """The shorter side in pixels of each of a partition's sampled images whose header Pillow
    reads (runs on a worker; the pixels are not decoded)."""
    sides = []
    for image in read_partition(item.partition, skip=_skip(item)):
        if item.limit is not None and len(sides) >= item.limit:
            break
        if image.problem is None:
            try:
                with Image.open(io.BytesIO(image.data)) as opened:
                    sides.append(min(opened.size))
            except (UnidentifiedImageError, OSError, ValueError):
                continue
    return sides


def working_size(client: Client, items: list[SampledPartition], bounds: tuple[int, int]) -> int:
    """The median shorter side of the sampled images, within ``bounds``."""
    parts = client.gather(client.map(shorter_sides, items, pure=False))
    sides = [side for part in parts for side in part]
    if not sides:
        raise ValueError("none of the sampled images could be read to choose --image-size auto")
    return int(np.clip(round(float(np.median(sides))), *bounds))


def describe_sample(vocabulary: BaseEstimator, item: SampledPartition) -> dict[str, np.ndarray]:
    """The local descriptors of a partition's sampled images (runs on a worker; the result
    stays there). ``"images"`` and ``"refused"`` count them."""
    request = ImageRequest(*vocabulary.image_request)
    mode, (height, width) = vocabulary.image_request
    images, refused = [], 0
    for image in read_partition(item.partition, skip=_skip(item)):
        if item.limit is not None and len(images) >= item.limit:
            break
        if image.problem is not None:
            refused += 1
            continue
        try:
            images.append(decode_image(image.data, [request])[0])
        except ImageRejected:
            refused += 1
    shape = (0, height, width) if mode == "L" else (0, height, width, 3)
    batch = np.stack(images) if images else np.zeros(shape, np.uint8)
    chunk = vocabulary.local_descriptors(batch)
    return {**chunk, "images": np.array([len(images), refused])}


def _counts(chunk: dict[str, np.ndarray]) -> tuple[int, int, int]:
    """(images, refused, local descriptors) of a chunk."""
    descriptors = next(v for k, v in chunk.items() if k != "images")
    return int(chunk["images"][0]), int(chunk["images"][1]), len(descriptors)


def fit_vocabulary(
    source: str,
    path: Any,
    vocabulary: BaseEstimator,
    client: Client,
    *,
    sample: int,
    seed: int = 0,
    source_options: dict[str, str] | None = None,
    progress: Callable[[int, int], None] | None = None,
    auto_size: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Fit ``vocabulary`` on a sample of SOURCE's images on ``client``'s cluster and save it at
    ``path``; returns a summary of the fit. ``progress(done, total)`` is called with the sampled
    images read as partitions finish (the passes that follow report to
    `pipeline.describe.watch_passes`). With ``auto_size`` (smallest, largest) the vocabulary's
    image_size is first set to the sample's median shorter side within those bounds."""
    started = time.perf_counter()
    items = sample_partitions(source, sample, seed, source_options)
    if auto_size is not None:
        vocabulary.set_params(image_size=working_size(client, items, auto_size))
        vocabulary.check_params()
    futures = client.map(describe_sample, [vocabulary] * len(items), items, pure=False)
    try:
        counted = client.map(_counts, futures, pure=False)
        counts, read, asked = [], 0, sum(item.asked for item in items)
        for future in as_completed(counted):
            counts.append(future.result())
            read += sum(counts[-1][:2])
            if progress is not None:
                progress(read, asked)
        images, refused, descriptors = (int(n) for n in np.sum(counts, axis=0))
        if images == 0:
            raise ValueError(f"{source}: none of the {refused} sampled images could be decoded")
        vocabulary.fit_chunks(ClusterChunks(client, futures), descriptors)
    finally:
        client.cancel(futures)
    save(vocabulary, path, source=str(source), sample_images=images, sample_seed=seed)
    summary = {
        "images": images,
        "refused": refused,
        "local_descriptors": descriptors,
        "dim": int(vocabulary.n_features_out_),
        "image_size": int(vocabulary.image_size),
        "seconds": time.perf_counter() - started,
    }
    if isinstance(vocabulary, FisherVector):
        summary.update({f"{c}_log_likelihood": v for c, v in vocabulary.log_likelihood_.items()})
        summary.update({f"{c}_em_iterations": v for c, v in vocabulary.n_iter_.items()})
    else:
        summary["kmeans_iterations"] = vocabulary.n_iter_
    return summary
