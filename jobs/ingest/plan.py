"""An image ingest planned on the client before any cluster is needed: the source listed, the
images the store lacks found (by listing, by the record of files committed whole, by the
listing kept from the last ingest), and cut into tasks sized by the descriptors' cost
(`partition_size`). An ingest with nothing new (a scheduled turn, most minutes) decides so from
the listing and the store alone: the descriptors, the codec and the cluster are imported only
where they are first needed, and nothing here imports scikit-learn, numba or distributed.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imgscale.jobs.ingest.changes import Changes, find_changes
from imgscale.jobs.ingest.known import (
    DEFAULT_SPLIT,
    EMPTY_SHA256,
    Known,
    image_id,
    known_of,
)
from imgscale.jobs.ingest.whole_files import WholeFiles, find_whole_files
from imgscale.storage import (
    FeatureStore,
    ImagePartition,
    StoreError,
    is_url,
    open_image_source,
    open_store,
)

if TYPE_CHECKING:
    from imgscale.jobs.features import Features
    from imgscale.pipeline.pq import PQCodec

# The most images of a listed source (a folder, a list file) one task reads; below it,
# `partition_size` sizes tasks by their work. A cheap descriptor's tasks are this long (colour:
# under a second), so that the tasks in flight cover the client's commit of a chunk of rows.
IMAGES_PER_PARTITION = 4096
# A task describes about this many seconds of images (`partition_size`, by the descriptors'
# declared cost): scheduling it and returning its rows are a small part of that, and the last
# tasks leave the other cores idle for no longer.
TASK_SECONDS = 2.0
MIN_TASK_SECONDS = 0.25
# Tasks each worker thread gets at least when the new images are few, so that all share them.
TASKS_PER_THREAD_AT_LEAST = 4
# Images whose signatures train a PQ codebook: faiss's 39 a centroid (39 × 256 = 9,984), 2.4 GiB
# of 64K-D signatures, held by the workers.
DEFAULT_PQ_SAMPLE = 10_000


def is_image_source(source: str, features: str | None, store: Any) -> bool:
    """Whether ``imgscale ingest SOURCE STORE`` ingests images: when ``--features`` names
    descriptors, when SOURCE can only be images (a folder, tar shards, a pattern, a URL), or
    when STORE is a store of images; else SOURCE is a file of vectors."""
    if features or is_url(source) or Path(source).is_dir() or source.endswith(".tar"):
        return True
    if any(c in source for c in "*?{"):
        return True
    existing = open_existing(store)
    return existing is not None and existing.descriptor is not None


@dataclass
class IngestPlan:
    """What an ingest will do, found on the client before any cluster is needed: the
    descriptors, what the store holds, and the partitions holding new images (``total``: their
    count, None when listing cannot tell, as for tar shards and parquet), committed as
    ``split``. ``features`` is None when the store describes them and listing found nothing new
    (`nothing_to_do`): no descriptor is loaded then."""

    source: str
    store_path: Any
    features: Features | None
    known: Known
    partitions: list[ImagePartition]
    total: int | None
    started: float = field(default_factory=time.perf_counter)
    pq: int | None = None
    """Sub-quantizers of the codes the store keeps (None: float rows)."""
    codec: PQCodec | None = None
    """The existing store's codec; None when this ingest trains it (or keeps float rows)."""
    pq_sample: int = DEFAULT_PQ_SAMPLE
    pq_seed: int = 0
    source_options: dict[str, str] | None = None
    split: str = DEFAULT_SPLIT
    changes: Changes | None = None
    """Committed images whose file changed or is gone since the source's last ingest (None:
    a source whose files are not compared, `jobs.ingest.changes`)."""
    refused_unchanged: int = 0
    """Images refused before whose file is unchanged, not read again (`_refused_unchanged`)."""
    whole_files: WholeFiles | None = None
    """The source's files of many images committed whole (None: a source of image files)."""


def plan_ingest(
    source: str,
    store_path: Any,
    *,
    features: str | None = None,
    images_per_partition: int = IMAGES_PER_PARTITION,
    source_options: dict[str, str] | None = None,
    pq: int | None = None,
    pq_sample: int = DEFAULT_PQ_SAMPLE,
    pq_seed: int = 0,
    split: str = DEFAULT_SPLIT,
    threads: int | None = None,
) -> IngestPlan:
    """List SOURCE and keep the partitions with images STORE lacks, cut (when listing gives
    the keys) into tasks of the size `partition_size` gives for ``threads`` worker threads
    (default: this machine's cores), at most ``images_per_partition`` images each. ``features`` is
    ``--features``: required for a new store; an existing one is described as its record says,
    and refuses other descriptors. ``pq`` is ``--pq``: a new store keeps codes of that many
    sub-quantizers; an existing store keeps its encoding, and refuses another. ``split`` names
    the rows (and qualifies their ids, `image_id`)."""
    from imgscale.jobs.features import seconds_per_image, spec_names

    started = time.perf_counter()
    threads = threads or os.cpu_count() or 1
    images = open_image_source(source, **(source_options or {}))
    existing = open_existing(store_path)
    if features is None and (existing is None or existing.descriptor is None):
        raise StoreError(
            f"{source}: say which descriptors to compute, e.g. --features gist "
            f"(store {store_path} has no record of any)"
        )
    if pq_sample < 1:
        raise ValueError(f"--pq-sample {pq_sample}: expected at least 1 image")
    whole = find_whole_files(existing, split, images.source_files)
    leave_out = whole.unchanged if whole is not None else frozenset()
    partitions = images.partitions(images_per_partition, leave_out=leave_out)
    changes = find_changes(existing, source, partitions, partial(image_id, split))
    unread = _refused_unchanged(existing, changes, split)
    listed = [p.keys for p in partitions]
    new = None if not listed or None in listed else _new_images(listed, existing, split, unread)
    total = None if new is None else int(new.sum())
    # Tasks sized by cost over the new images, or over every image of the files read when
    # listing cannot tell which are new but knows or estimates how many there are (parquet,
    # local tar shards).
    sized_over = total if total is not None else images.estimated_images(leave_out)
    size = images_per_partition
    if sized_over is not None:
        stored = existing.descriptor["features"] if features is None else []
        names = spec_names(features) if features else [entry["name"] for entry in stored]
        size = partition_size(seconds_per_image(names), sized_over, images_per_partition, threads)
    if new is not None:  # tasks of new images alone
        partitions = images.partitions(size, only=new)
    else:
        if size != images_per_partition:
            partitions = images.partitions(size, leave_out=leave_out)
        partitions, total = _partitions_with_new_keys(partitions, existing, split, unread)
        total = 0 if not partitions else total  # every file committed whole before
    if whole is not None:
        whole.read_by(partitions)
    if features is None and total == 0 and pq is None:
        return IngestPlan(source, store_path, None, known_of(None, split), [], 0, started,
                          split=split, changes=changes, refused_unchanged=len(unread),
                          whole_files=whole)  # fmt: skip
    from imgscale.jobs.features import (
        check_same_features,
        features_of_store,
        names_record,
        parse_features,
    )

    stored = existing.descriptor if existing is not None else None
    if features is None or names_record(features, stored):
        described_by = features_of_store(stored, str(store_path))
    else:
        described_by = parse_features(features)
        if existing is not None:
            check_same_features(existing.descriptor, described_by, str(store_path))
    pq, codec = pq_of(described_by, existing, pq, str(store_path))
    # Partitions of new images alone skip no key: the workers need only the committed digests.
    known = known_of(existing if partitions else None, split, unread, keys=new is None)
    return IngestPlan(
        source, store_path, described_by, known, partitions, total, started,
        pq, codec, pq_sample, pq_seed, source_options, split, changes, len(unread), whole,
    )  # fmt: skip


def pq_of(
    features: Features, existing: FeatureStore | None, pq: int | None, store: str
) -> tuple[int | None, PQCodec | None]:
    """(sub-quantizers, the existing store's codec) of an ingest given ``--pq`` (or not)."""
    from imgscale.jobs.features import VOCABULARY_KINDS

    codec = None if existing is None else existing.codec
    if codec is not None:
        # New rows are coded by the store's own codec; --pq names a PQ codec's sub-quantizers.
        m = getattr(codec, "m", None)
        if pq is not None and pq != m:
            held = f"PQ codes of {m} sub-quantizers" if m else f"{existing.encoding} codes"
            raise StoreError(
                f"store {store}: holds {held}; refusing --pq {pq} "
                "(rows of another codebook; use another store)"
            )
        return m, codec
    if pq is None:
        return None, None
    if existing is not None:
        raise StoreError(
            f"store {store}: holds float rows; refusing --pq {pq} (codes go to a new store)"
        )
    if not any(e["name"] in VOCABULARY_KINDS for e in features.record["features"]):
        raise ValueError(
            f"--pq {pq}: for signatures of a vocabulary (--features fisher:VOCAB.model or "
            f"bow:VOCAB.model); --features {features.label} has none"
        )
    from imgscale.pipeline.pq import check_m

    try:
        check_m(features.dim, pq)
    except ValueError as exc:
        raise ValueError(f"--pq {pq}: {exc}") from None
    return pq, None


def starts_a_store(store_path: Any) -> bool:
    """Whether an ingest into ``store_path`` creates the store: every image it lists is new."""
    return open_existing(store_path) is None


def open_existing(store_path: Any) -> FeatureStore | None:
    try:
        return open_store(store_path)
    except StoreError:
        return None


def _refused_unchanged(
    store: FeatureStore | None, changes: Changes | None, split: str
) -> list[str]:
    """Ids of refused images whose file has the size and time it had when listed at their
    refusal: the same bytes would be refused again (a duplicate never becomes new, a broken file
    stays broken until rewritten). Images that could not be read at all are read again."""
    if store is None or changes is None or not changes.unchanged:
        return []
    rejected = store.rejected()
    unchanged = {image_id(split, key) for key in changes.unchanged}
    return [
        key
        for key, digest in zip(
            rejected.column("key").to_pylist(), rejected.column("sha256").to_pylist(), strict=True
        )
        if key in unchanged and digest != EMPTY_SHA256
    ]


def _new_images(
    keys: list[tuple[str, ...]], store: FeatureStore | None, split: str, unread: list[str]
) -> np.ndarray:
    """Whether each image of the partitions holding ``keys`` is new, in their order: neither
    committed nor among the ``unread`` ids."""
    if store is None:
        return np.ones(sum(map(len, keys)), bool)
    ids = pa.array([image_id(split, k) for part in keys for k in part], pa.string())
    committed = store.rows(columns=["id"]).column("id")  # compared by pyarrow: no id hashing
    skip = pa.concat_arrays([committed.combine_chunks(), pa.array(unread, pa.string())])
    return np.asarray(pc.invert(pc.is_in(ids, value_set=skip)), bool)


def _partitions_with_new_keys(
    partitions: list[ImagePartition], store: FeatureStore | None, split: str, unread: list[str]
) -> tuple[list[ImagePartition], int | None]:
    """The ``partitions`` of a source that lists no keys holding a new image, and how many new
    images they hold, when reading their keys alone tells (a parquet file's id column or its
    rows): a re-ingest that finds nothing new sends the workers nothing. All of them (count
    None) for a new store, or when only reading the images tells their keys (tar shards)."""
    if store is None or (store.committed_rows == 0 and not unread):
        return partitions, None
    keys = [p.read_keys() for p in partitions]
    if None in keys:
        return partitions, None
    new = _new_images(keys, store, split, unread)
    ends = np.cumsum([len(k) for k in keys])
    kept = [
        p
        for p, part, end in zip(partitions, keys, ends, strict=True)
        if new[end - len(part) : end].any()
    ]
    return kept, int(new.sum())


def partition_size(seconds_per_image: float, images: int, most: int, threads: int) -> int:
    """Images a task describes, of ``images`` new ones, at most ``most``: about `TASK_SECONDS`
    of describing at the descriptors' declared cost, fewer when that would give some of the
    ``threads`` no work or leave the last tasks running alone (each thread gets
    `TASKS_PER_THREAD_AT_LEAST` tasks), never under `MIN_TASK_SECONDS` of work."""
    by_cost = math.ceil(TASK_SECONDS / seconds_per_image)
    fewest = math.ceil(MIN_TASK_SECONDS / seconds_per_image)
    even = math.ceil(images / (TASKS_PER_THREAD_AT_LEAST * max(1, threads)))
    return max(1, min(most, by_cost, max(fewest, even)))
