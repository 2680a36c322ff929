"""``imgscale fit-features SOURCE VOCAB.model --features bow|fisher``: a vocabulary of local
descriptors, learned on the cluster from a sample of a source's images.

The client lists the source and draws the sample (``jobs.ingest.sample``: N keys at random, or
the first images of every partition where listing gives no keys). Each task reads and decodes
one partition's sampled images (``jobs.ingest.read_and_decode``, the loop an ingest's workers
run), describes them (`BagOfWords.local_descriptors`, `FisherVector.local_descriptors`) and
keeps the local descriptors on its worker as the task's result: they never reach the client.
Every pass of the fit (`pipeline.describe.vocabulary`: PCA, each k-means and each EM iteration)
then maps a statistics kernel over those results, one task per partition, and adds the small
per-partition sums on the client. Images that cannot be decoded are counted and left out.

With ``auto_size`` the working size (the side of the square images described) is chosen from
the sample before any is described: the median shorter side of its images, within bounds, so a
vocabulary of 250-pixel photos describes them near their own size rather than at a fixed one.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError
from sklearn.base import BaseEstimator

from imgscale.jobs.cluster import ClusterChunks, cluster_mapper
from imgscale.jobs.ingest import SampledPartition, read_and_decode, sample_partitions
from imgscale.jobs.models import save
from imgscale.pipeline.describe import BagOfWords, FisherVector, FitPass, watch_passes
from imgscale.storage import ImageRequest, read_partition

# The bounds of ``--image-size auto`` (fit-features --help says what they were measured on).
AUTO_IMAGE_SIZE = (64, 256)


def vocabulary_of(kind: str, **params: Any) -> BaseEstimator:
    """The unfitted vocabulary ``--features bow`` or ``--features fisher`` names."""
    classes = {"bow": BagOfWords, "fisher": FisherVector}
    if kind not in classes:
        raise ValueError(f"--features {kind!r}: expected bow or fisher")
    vocabulary = classes[kind](**params)
    vocabulary.check_params()
    return vocabulary


def fit_vocabulary_on_cluster(
    source: str,
    path: str | os.PathLike,
    kind: str,
    *,
    sample: int,
    seed: int = 0,
    scheduler: str | None = None,
    quiet: bool = False,
    source_options: dict[str, str] | None = None,
    auto_size: tuple[int, int] | None = None,
    progress: Callable[[int, int], None] | None = None,
    on_pass: Callable[[FitPass], None] | None = None,
    **params: Any,
) -> dict[str, Any]:
    """`imgscale fit-features`: the ``kind`` vocabulary (`vocabulary_of` with ``params`` and
    ``seed``) fitted by `fit_vocabulary` on the cluster, whose workers must see SOURCE, and
    saved at ``path``; ``on_pass`` watches each k-means or EM pass. Returns the fit's summary."""
    from imgscale.jobs.cluster import connect, shared_path
    from imgscale.storage import is_url

    vocabulary = vocabulary_of(kind, **params, random_state=seed)
    if not is_url(source):
        source = str(shared_path(source))
    local = [Path(source)] if not is_url(source) and Path(source).exists() else []
    with (
        connect(scheduler, quiet=quiet, shared_paths=local) as client,
        watch_passes(on_pass or (lambda _: None)),
    ):
        return fit_vocabulary(
            source, shared_path(path), vocabulary, client, sample=sample, seed=seed,
            source_options=source_options, progress=progress, auto_size=auto_size,
        )  # fmt: skip


def shorter_sides(item: SampledPartition) -> list[int]:
    """The shorter side in pixels of each of a partition's sampled images whose header Pillow
    reads (runs on a worker; the pixels are not decoded)."""
    sides = []
    for image in read_partition(item.partition, skip=item.skip):
        if item.limit is not None and len(sides) >= item.limit:
            break
        if image.problem is None:
            try:
                with Image.open(io.BytesIO(image.data)) as opened:
                    sides.append(min(opened.size))
            except (UnidentifiedImageError, OSError, ValueError):
                continue
    return sides


def working_size(client: Any, items: list[SampledPartition], bounds: tuple[int, int]) -> int:
    """The median shorter side of the sampled images, within ``bounds``."""
    parts = cluster_mapper(client)(shorter_sides, (), [(item,) for item in items])
    sides = [side for part in parts for side in part]
    if not sides:
        raise ValueError("none of the sampled images could be read to choose --image-size auto")
    return int(np.clip(round(float(np.median(sides))), *bounds))


def local_descriptors_of_sample(
    vocabulary: BaseEstimator, item: SampledPartition
) -> dict[str, np.ndarray]:
    """The local descriptors of a partition's sampled images (runs on a worker; the result
    stays there). ``"images"`` and ``"refused"`` count them."""
    request = ImageRequest(*vocabulary.image_request)
    mode, (height, width) = vocabulary.image_request
    images, refused = [], 0
    for read in read_and_decode(item.partition, [request], skip=item.skip, limit=item.limit):
        if read.pixels is None:
            refused += 1
        else:
            images.append(read.pixels[0])
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
    client: Any,
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
    chunks = ClusterChunks.compute(client, local_descriptors_of_sample, (vocabulary,), items)
    try:
        counts, read, asked = [], 0, sum(item.asked for item in items)
        for count in chunks.as_finished(_counts):
            counts.append(count)
            read += sum(count[:2])
            if progress is not None:
                progress(read, asked)
        images, refused, descriptors = (int(n) for n in np.sum(counts, axis=0))
        if images == 0:
            raise ValueError(f"{source}: none of the {refused} sampled images could be decoded")
        vocabulary.fit_chunks(chunks, descriptors)
    finally:
        chunks.release()
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
