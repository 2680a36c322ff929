"""A sample of a source's images, drawn on the client and read on the workers: the images a
vocabulary is fitted on (``imgscale fit-features``) and those whose signatures train a PQ
codebook (``imgscale ingest --pq``).

With listed keys (a folder, a list file) N keys at random (seeded); without, the first images of
every partition, so the sample spans the whole source: N shared in proportion to the
partitions' sizes where listing knows them (parquet row groups), so it holds exactly N images,
else ⌈N / partitions⌉ of each (tar shards, one partition a shard).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from imgscale.storage import ImagePartition, open_image_source

# Images a partition of the sample holds at most (a listed source's).
IMAGES_PER_PARTITION = 64


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

    @property
    def skip(self) -> Callable[[str], bool] | None:
        """`read_partition`'s ``skip``: every key outside the sample, when the sample has keys."""
        keys = self.keys
        return None if keys is None else (lambda key: key not in keys)


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
