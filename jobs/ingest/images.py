"""``imgscale ingest SOURCE STORE --features gist``: images in, one row of descriptors each.

The client lists the source (`imgscale.storage.open_image_source`) and never holds image
bytes: each Dask task reads one partition, hashes each image's bytes (sha256), decodes it
(`decode_image`) and describes it (`jobs.features`), and returns rows of descriptors with their
keys, labels and digests, and the images it refused with a one-line reason each. Tasks are
submitted a few at a time (`stream_map`), so the workers hold a bounded number of results
however large the source.

The client appends the rows through the store's ordinary writer, one commit per chunk of rows
or per `COMMIT_SECONDS`, whichever comes first. Each image's id is its source key, qualified by
its split when that is not ``train`` (`image_id`: ``test/cat/0000.jpg``), so the usual layout of
datasets, ``photos/train/<class>/0000.jpg`` beside a different ``photos/test/<class>/0000.jpg``,
gives each photo its own id with no flag. Ids are unique in a store, so a run killed at any
moment (kill -9 included) loses only its uncommitted rows, and the next run, listing the source
again, skips every key already committed: the store ends up holding every image exactly once,
and a folder that grew is brought up to date by ingesting it again. Tar shards and parquet files
committed whole are recorded in the store (`jobs.whole_files`): an ingest that finds them
unchanged reads none of them, where it would otherwise read every shard through to learn its
keys. An image whose bytes are already committed under another key (a renamed or copied file,
the same photo in another split) is not decoded again: it is refused as a duplicate, with the key
it duplicates. Refused images go to the store's table of rejects (`imgscale info --rejected`); a
refused image that is fixed is read again by the next run.

Each commit runs in a thread of its own (`_Committer`), while the client goes on receiving
results and submitting tasks: the workers keep describing as rows are written.

With ``--pq M`` (signatures of a vocabulary, ``bow:`` or ``fisher:``), the store keeps product
quantization codes instead of float rows (paper 002 §4.1: 64K-D Fisher vectors of 1.2M images
take 320 GB as float32): each task encodes its rows before returning them, so float signatures
never reach the client or the disk. The codebook is trained by the ingest that creates the
store, on the signatures of a sample of the source's images (``--pq-sample``, drawn as
``fit-features`` draws its sample, computed on the workers), and kept in the store; every later
ingest into the store encodes with that codebook, so a store never holds codes of two codebooks.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imgscale.jobs.feature_records import spelling
from imgscale.jobs.image_changes import Changes, find_changes
from imgscale.jobs.whole_files import WholeFiles, find_whole_files
from imgscale.storage import (
    ROW_DIGEST_BYTES,
    FeatureStore,
    HashRuns,
    ImagePartition,
    ImageRejected,
    StoreError,
    create_or_open,
    create_pq_store,
    create_store,
    decode_image,
    default_rows_per_chunk,
    image_rows_per_chunk,
    open_image_source,
    read_partition,
    row_digest,
)

if TYPE_CHECKING:
    from imgscale.jobs.features import Features
    from imgscale.jobs.fit_features import SampledPartition
    from imgscale.pipeline.pq_codec import PQCodec

# The descriptors, the codec, the cluster and the sampling of a PQ codebook are imported where
# they are first needed: an ingest with nothing new (a scheduled turn, most minutes) decides so
# from the listing and the store alone, without scikit-learn, numba or distributed.

# (stage, done, total, unit): progress of work in stages, e.g. ("pq codebook", 512, 8192,
# "sub-quantizers").
StageProgress = Callable[[str, int, int, str], None]
# A commit at least this often, so a killed run loses at most this much work.
COMMIT_SECONDS = 60.0
# The most images of a listed source (a folder, a list file) one task reads; below it,
# `partition_size` sizes tasks by their work. A cheap descriptor's tasks are this long (colour:
# under a second), so that the tasks in flight cover the client's commit of a chunk of rows.
IMAGES_PER_PARTITION = 4096
# Tasks in flight per worker thread: enough to keep every core busy while results come back.
TASKS_PER_THREAD = 2
# A task describes about this many seconds of images (`partition_size`, by the descriptors'
# declared cost): scheduling it and returning its rows are a small part of that, and the last
# tasks leave the other cores idle for no longer.
TASK_SECONDS = 2.0
MIN_TASK_SECONDS = 0.25
# Tasks each worker thread gets at least when the new images are few, so that all share them.
TASKS_PER_THREAD_AT_LEAST = 4
EMPTY_SHA256 = hashlib.sha256(b"").digest()
# Images whose signatures train a PQ codebook: faiss's 39 a centroid (39 × 256 = 9,984), 2.4 GiB
# of 64K-D signatures, held by the workers.
DEFAULT_PQ_SAMPLE = 10_000
# The split whose images' ids are their keys as the source gives them; other splits' are qualified.
DEFAULT_SPLIT = "train"


def image_id(split: str, key: str) -> str:
    """The id in a store of the image ``key`` of a source ingested as ``split``: the key itself
    for the default split, ``SPLIT/KEY`` for another, so that a test split reusing the train
    split's file names (``cat/0000.jpg`` in both) neither collides with it nor vanishes."""
    return key if split == DEFAULT_SPLIT else f"{split}/{key}"


@dataclass(frozen=True)
class Known:
    """What the store already holds, sent once to every worker: hashes of the committed ids
    (sorted; a key whose id's hash is among them is not read), and the committed images' sha256
    digests (sorted by their first 8 bytes), with the id each belongs to; and the split this
    ingest names its images' ids by (`image_id`)."""

    key_hashes: np.ndarray
    digest_prefixes: np.ndarray
    digests: np.ndarray
    digest_ids: pa.Array
    split: str = DEFAULT_SPLIT

    def id_of_key(self, key: str) -> str:
        return image_id(self.split, key)

    def has_key(self, key: str) -> bool:
        """Whether the id of the source's image ``key`` is committed."""
        if not len(self.key_hashes):
            return False
        h = np.uint64(key_hash(self.id_of_key(key)))
        i = int(self.key_hashes.searchsorted(h))
        return i < len(self.key_hashes) and self.key_hashes[i] == h

    def id_of(self, digest: bytes) -> str | None:
        """The id of the committed image with these bytes' ``digest`` (sha256), if any."""
        if not len(self.digest_prefixes):
            return None
        prefix = np.frombuffer(digest[:8], ">u8").astype(np.uint64)[0]
        first = int(np.searchsorted(self.digest_prefixes, prefix, side="left"))
        stop = int(np.searchsorted(self.digest_prefixes, prefix, side="right"))
        for i in range(first, stop):
            if self.digests[i].tobytes() == row_digest(digest):
                return self.digest_ids[i].as_py()
        return None


def key_hash(key: str) -> int:
    """A 64-bit hash of an image's key, computed per key on the workers (blake2b, in C: the
    per-key cost must stay far below a JPEG decode). A key whose hash collides with a committed
    one's would be skipped: with n committed keys, a chance of n / 2⁶⁴ for each new key."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")


def known_of(
    store: FeatureStore | None,
    split: str = DEFAULT_SPLIT,
    unread: Sequence[str] = (),
    *,
    keys: bool = True,
) -> Known:
    """What ``store`` holds, for an ingest as ``split``; ``unread`` are more ids not to read.
    Without ``keys``, no id's hash: for partitions holding new images alone."""
    empty, unread_ids = np.empty(0, np.uint64), pa.array(unread, pa.string())
    if store is None or store.committed_rows == 0:
        hashes = _sorted_key_hashes([unread_ids]) if keys else empty
        no_ids = pa.array([], pa.string())
        return Known(hashes, empty, np.empty((0, 32), np.uint8), no_ids, split)
    committed = store.rows(columns=["id"]).column("id").chunks if keys else []
    content = store.content_hashes()
    column = content.column("sha256").combine_chunks()  # 16 bytes a row (`row_digest`)
    digests = np.frombuffer(column.buffers()[1], np.uint8).reshape(-1, column.type.byte_width)
    digests = digests[: content.num_rows]
    prefixes = digests[:, :8].copy().view(">u8").ravel().astype(np.uint64)
    order = np.argsort(prefixes, kind="stable")
    # The ids stay arrow strings: a Python string an id would take 50 bytes more each, on the
    # client and on every worker.
    return Known(
        _sorted_key_hashes([*committed, unread_ids]) if keys else empty,
        prefixes[order],
        digests[order],
        content.column("id").combine_chunks().take(order),
        split,
    )


def _sorted_key_hashes(ids: Sequence[pa.Array]) -> np.ndarray:
    """The sorted `key_hash` of every id of the arrow arrays ``ids``, made one array's Python
    strings at a time."""
    hashes = [np.fromiter(map(key_hash, part.to_pylist()), np.uint64, len(part)) for part in ids]
    return np.sort(np.concatenate(hashes)) if hashes else np.empty(0, np.uint64)


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
    accepted, decoded = [], []
    for image in read_partition(partition, skip=known.has_key):
        out.images_seen += 1
        key = known.id_of_key(image.key)
        if image.problem is not None:
            out.refused.append((key, EMPTY_SHA256, image.problem))
            continue
        digest = hashlib.sha256(image.data).digest()
        holder = known.id_of(digest)
        if holder is not None:
            out.refused.append((key, digest, f"same bytes as {holder!r}, already stored"))
            continue
        try:
            decoded.append(decode_image(image.data, features.requests))
        except Exception as exc:
            out.refused.append((key, digest, refusal(exc)))
            continue
        accepted.append((key, image, digest))
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


def describe_sampled(features: Features, item: SampledPartition) -> np.ndarray:
    """Float rows of a partition's sampled images that decode and describe (runs on a worker)."""
    skip = None if item.keys is None else (lambda key: key not in item.keys)
    decoded = []
    for image in read_partition(item.partition, skip=skip):
        if item.limit is not None and len(decoded) >= item.limit:
            break
        if image.problem is None:
            try:
                decoded.append(decode_image(image.data, features.requests))
            except Exception as exc:
                refusal(exc)  # raises when it is not about the image
    rows, problems = describe_each(features, decoded)
    return rows[[problem is None for problem in problems]]


def train_codec(
    plan: IngestPlan, client: Any, progress: StageProgress | None = None
) -> tuple[PQCodec, int]:
    """A PQ codec of ``plan.pq`` sub-quantizers trained on the signatures of ``plan.pq_sample``
    images of the source, and the number of signatures it was trained on. ``progress`` is told
    the sampled images described, then the sub-quantizers trained, as tasks finish.

    The signatures are computed on ``client``'s cluster and stay there; the sub-quantizers are
    trained on the workers, a block of sub-spaces a task (`train_sub_spaces`), each task taking
    its columns of every partition's signatures from the workers that hold them (the client
    never holds the sample: 1 GiB at 64K-D). Each sub-space's k-means sees only its own
    columns, so the codebook is the one `PQCodec.train` learns on all of them at once, and the
    8,192 k-means of a 64K-D codebook share the cores.
    """
    from distributed import as_completed

    from imgscale.jobs.fit_features import sample_partitions
    from imgscale.pipeline.pq_codec import PQCodec, check_training_rows

    items = sample_partitions(plan.source, plan.pq_sample, plan.pq_seed, plan.source_options)
    signatures = client.map(describe_sampled, [plan.features] * len(items), items, pure=False)
    tell = progress or (lambda *_: None)
    n, asked = 0, sum(item.asked for item in items)
    for described in as_completed(client.map(len, signatures)):
        n += described.result()
        tell("pq sample", n, asked, "images")
    try:
        check_training_rows(n)
    except ValueError as exc:
        raise ValueError(f"--pq-sample {plan.pq_sample}: {exc}") from None
    dsub = plan.features.dim // plan.pq
    threads = max(1, sum(client.nthreads().values()))
    blocks = np.array_split(np.arange(plan.pq), min(plan.pq, TASKS_PER_THREAD * threads))
    columns = [(b[0] * dsub, (b[-1] + 1) * dsub) for b in blocks]
    trained = client.map(
        train_sub_spaces, columns, [len(b) for b in blocks], seed=plan.pq_seed,
        signatures=signatures, pure=False,
    )  # fmt: skip
    sub_quantizers = {future.key: len(block) for future, block in zip(trained, blocks, strict=True)}
    done = 0
    for future in as_completed(trained):
        done += sub_quantizers[future.key]
        tell("pq codebook", done, plan.pq, "sub-quantizers")
    return PQCodec(np.concatenate(client.gather(trained))), n


def train_sub_spaces(
    columns: tuple[int, int], m: int, *, seed: int, signatures: list[np.ndarray]
) -> np.ndarray:
    """Codebook (m, 256, dsub) of the ``m`` consecutive sub-spaces in ``columns`` of the sampled
    ``signatures`` (one array a partition), trained on those columns alone (runs on a worker;
    faiss on one thread, as the worker has one core)."""
    import faiss

    from imgscale.pipeline.pq_codec import PQCodec

    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        with warnings.catch_warnings():  # the client warned of a small sample already
            warnings.simplefilter("ignore")
            rows = np.concatenate([part[:, columns[0] : columns[1]] for part in signatures])
            return PQCodec.train(rows, m, seed=seed).codebook
    finally:
        faiss.omp_set_num_threads(threads)


@dataclass
class _Pending:
    """Rows (by id) and refusals received, not yet committed."""

    keys: list[str] = field(default_factory=list)
    labels: list[str | None] = field(default_factory=list)
    digests: list[bytes] = field(default_factory=list)
    rows: list[np.ndarray] = field(default_factory=list)
    refused: list[tuple[str, bytes, str]] = field(default_factory=list)
    same_bytes_as_committed: list[tuple[str, bytes]] = field(default_factory=list)
    """Images refused for bytes this ingest committed before: the store names the holder."""
    ids_maybe_committed: set[str] = field(default_factory=set)
    """Ids whose hash is one this ingest committed: refused if the store holds the id."""
    source_files: list[str] = field(default_factory=list)
    """The source files of the partitions received, once a partition (`WholeFiles`)."""
    unreadable_files: set[str] = field(default_factory=set)
    """Those of them holding an image that could not be read."""

    def __len__(self) -> int:
        return len(self.keys)


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
    refused_unchanged: int = 0
    """Images refused before whose file is unchanged, not read again (`_refused_unchanged`)."""
    """Committed images whose file changed or is gone since the source's last ingest (None:
    a source whose files are not compared, `jobs.image_changes`)."""
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
    existing = _open_existing(store_path)
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
    pq, codec = _pq_of(described_by, existing, pq, str(store_path))
    # Partitions of new images alone skip no key: the workers need only the committed digests.
    known = known_of(existing if partitions else None, split, unread, keys=new is None)
    return IngestPlan(
        source, store_path, described_by, known, partitions, total, started,
        pq, codec, pq_sample, pq_seed, source_options, split, changes, len(unread), whole,
    )  # fmt: skip


def _pq_of(
    features: Features, existing: FeatureStore | None, pq: int | None, store: str
) -> tuple[int | None, PQCodec | None]:
    """(sub-quantizers, the existing store's codec) of an ingest given ``--pq`` (or not)."""
    from imgscale.jobs.features import VOCABULARY_KINDS

    if existing is not None and existing.encoding == "pq":
        codec = existing.codec
        if pq is not None and pq != codec.m:
            raise StoreError(
                f"store {store}: holds PQ codes of {codec.m} sub-quantizers; refusing --pq {pq} "
                "(rows of another codebook; use another store)"
            )
        return codec.m, codec
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
    from imgscale.pipeline.pq_codec import check_m

    try:
        check_m(features.dim, pq)
    except ValueError as exc:
        raise ValueError(f"--pq {pq}: {exc}") from None
    return pq, None


def ingest_images(
    plan: IngestPlan,
    client: Any,
    *,
    commit_rows: int | None = None,
    progress: Callable[[int, int | None, int, int], None] | None = None,
    codec_progress: StageProgress | None = None,
) -> dict[str, Any]:
    """Describe the planned images on ``client``'s cluster and append them as ``plan.split``;
    returns a summary.

    ``commit_rows`` (default: a 64 MiB float32 chunk's rows, `default_rows_per_chunk`) and
    `COMMIT_SECONDS` bound the work a kill loses; a commit holds at most ``commit_rows`` rows
    unless one partition (a tar shard, a parquet row group) holds more.
    ``progress(done, total, rows, refused)`` is called as partitions finish;
    ``codec_progress`` follows the training of a new store's PQ codebook (`train_codec`).
    """
    from imgscale.jobs.fanout import stream_map
    from imgscale.jobs.features import check_same_features

    described_by = plan.features
    provenance = {"source": str(plan.source)}
    if plan.pq is None:
        create = partial(
            create_store, dim=described_by.dim, descriptor=described_by.record,
            provenance=provenance, rows_per_chunk=image_rows_per_chunk(described_by.dim),
        )  # fmt: skip
    else:
        codec, sampled = (
            (plan.codec, 0) if plan.codec else train_codec(plan, client, codec_progress)
        )
        source = {"source": str(plan.source), "sample_images": sampled, "seed": plan.pq_seed}
        create = partial(
            create_pq_store, codec=codec, descriptor=described_by.record,
            provenance=provenance, source=source,
        )  # fmt: skip
    summary = {"images_seen": 0, "rows": 0, "refused": 0, "commits": 0, "partitions": 0,
               "already_stored": 0, "commit_seconds": 0.0}  # fmt: skip
    with create_or_open(plan.store_path, create) as (store, _):
        check_same_features(store.descriptor, described_by, str(plan.store_path))
        # The store's own codec: another ingest may have created the store meanwhile.
        codec = _pq_of(described_by, store, plan.pq, str(plan.store_path))[1]
        commit_rows = commit_rows or max(store.rows_per_chunk, default_rows_per_chunk(store.dim))
        threads = max(1, sum(client.nthreads().values())) if plan.partitions else 1
        pending, last_commit = _Pending(), time.monotonic()
        results = stream_map(
            client,
            describe_and_encode,
            (described_by, plan.known, codec),
            plan.partitions,
            in_flight=TASKS_PER_THREAD * threads,
        )
        if progress is not None:  # the describing starts (a new PQ store's codebook is trained)
            progress(0, plan.total, 0, 0)
        whole = plan.whole_files

        def committed(pending: _Pending) -> None:
            if whole is not None:
                whole.committed(pending.source_files, pending.unreadable_files)
                if whole.news:
                    whole.keep(store)

        with _Committer(store, plan.split, summary, committed) as committer:
            for result in results:
                summary["partitions"] += 1
                summary["images_seen"] += result.images_seen
                if len(pending) and len(pending) + len(result.keys) > commit_rows:
                    committer.commit(pending)  # a commit holds ≤ commit_rows
                    pending, last_commit = _Pending(), time.monotonic()
                _receive(pending, result, committer.taken)
                if len(pending) >= commit_rows or time.monotonic() - last_commit > COMMIT_SECONDS:
                    committer.commit(pending)
                    pending, last_commit = _Pending(), time.monotonic()
                if progress is not None:
                    done = summary["rows"] + len(committer.committing) + len(pending)
                    refused = (
                        summary["refused"]
                        + len(committer.committing.refused)
                        + len(pending.refused)
                    )
                    progress(summary["images_seen"], plan.total, done, refused)
            committer.commit(pending)
        summary["store_rows"] = store.committed_rows
    return finish_summary(plan, summary)


def finish_summary(
    plan: IngestPlan, summary: dict[str, Any], record: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The summary of a run, with its wall time, rate and descriptors (``record``'s, a store's
    record of them, when the plan loaded none)."""
    seconds = time.perf_counter() - plan.started
    record = plan.features.record if plan.features is not None else record
    changes = plan.changes
    return {
        **summary,
        "changed": len(changes.changed) if changes is not None else 0,
        "deleted": len(changes.deleted) if changes is not None else 0,
        "refused_unchanged": plan.refused_unchanged,
        "seconds": seconds,
        "images_per_second": summary["images_seen"] / seconds if seconds else 0.0,
        "features": ",".join(spelling(entry) for entry in record["features"]),
        "dim": record["dim"],
    }


def nothing_to_do(plan: IngestPlan) -> dict[str, Any]:
    """The summary of a plan with no new image (the store holds every image listed)."""
    store = _open_existing(plan.store_path)
    summary = {"images_seen": 0, "rows": 0, "refused": 0, "commits": 0, "partitions": 0,
               "already_stored": 0, "commit_seconds": 0.0}  # fmt: skip
    summary["store_rows"] = store.committed_rows if store is not None else 0
    if store is not None and plan.whole_files is not None and plan.whole_files.news:
        plan.whole_files.keep(store)
    return finish_summary(plan, summary, store.descriptor if store is not None else None)


def starts_a_store(store_path: Any) -> bool:
    """Whether an ingest into ``store_path`` creates the store: every image it lists is new."""
    return _open_existing(store_path) is None


def _open_existing(store_path: Any) -> FeatureStore | None:
    from imgscale.storage import open_store

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


def _receive(pending: _Pending, result: Described, taken: _Taken) -> None:
    """Add a partition's rows to those pending, refusing an image whose id or bytes another
    image of this run already brought (the first one received is kept): a source listing one id
    twice (a parquet file, a list file's id column) loses no other image. ``taken`` knows the
    ids and bytes of every image this run has taken, committed or pending: those committed are
    probed for the whole partition at once."""
    maybe_committed = taken.may_have_committed_ids(result.keys).tolist()
    bytes_committed = taken.have_committed_digests(result.digests).tolist()
    pending.refused.extend(result.refused)
    pending.source_files.extend(result.source_files)
    if any(digest == EMPTY_SHA256 for _, digest, _ in result.refused):
        pending.unreadable_files.update(result.source_files)
    keep = []
    for i, (key, digest) in enumerate(zip(result.keys, result.digests, strict=True)):
        if taken.has_pending_id(key):
            pending.refused.append((key, digest, f"id {key!r} is another image's, in this ingest"))
        elif (holder := taken.pending_holder(digest)) is not None:
            pending.refused.append((key, digest, f"same bytes as {holder!r}, in this ingest"))
        elif maybe_committed[i]:
            pending.ids_maybe_committed.add(key)  # the commit refuses it if the store has it
            keep.append(i)
        elif bytes_committed[i]:
            pending.same_bytes_as_committed.append((key, digest))
        else:
            taken.add(key, digest)
            keep.append(i)
    pending.keys.extend(result.keys[i] for i in keep)
    pending.labels.extend(result.labels[i] for i in keep)
    pending.digests.extend(result.digests[i] for i in keep)
    pending.rows.append(result.rows[keep])


class _Taken:
    """The ids and bytes of the images one ingest has taken, so that an image repeating an
    earlier one's is refused, in memory that does not grow by a Python object an image.

    The images of the rows not yet in the store (those pending and those being committed: at
    most two commits' worth, `_Committer`) are held exactly, each digest with its id. Once a
    commit is in the store, its images are kept as sorted runs (`HashRuns`) of the 8-byte hash
    of each id (`key_hash`) and the 16-byte digest the store keeps (`row_digest`): 24 bytes an
    image. A committed digest is exact; a committed id's hash is confirmed by the store when
    the rows are committed, and the store names the image whose bytes are repeated."""

    def __init__(self) -> None:
        # The images of the rows pending, then those of the commit running: ({id}, {sha256: id}).
        self._recent: list[tuple[set[str], dict[bytes, str]]] = [(set(), {})]
        self._id_hashes = HashRuns()
        self._digests = HashRuns()

    def add(self, key: str, digest: bytes) -> None:
        ids, digests = self._recent[-1]
        ids.add(key)
        digests[digest] = key

    def next_commit(self) -> None:
        """The pending rows went to a commit, and the commit before it is in the store."""
        self._recent.append((set(), {}))
        if len(self._recent) > 2:
            ids, digests = self._recent.pop(0)
            self._id_hashes.add(np.fromiter(map(key_hash, ids), np.uint64, len(ids)))
            self._digests.add(np.array([row_digest(d) for d in digests], f"S{ROW_DIGEST_BYTES}"))

    def has_pending_id(self, key: str) -> bool:
        return any(key in ids for ids, _ in self._recent)

    def pending_holder(self, digest: bytes) -> str | None:
        """The id of the pending image with these bytes, if any."""
        for _, digests in self._recent:
            if digest in digests:
                return digests[digest]
        return None

    def have_committed_digests(self, digests: Sequence[bytes]) -> np.ndarray:
        """Whether each of the sha256 ``digests`` is a committed image's."""
        if not len(self._digests):
            return np.zeros(len(digests), bool)
        probe = np.array([row_digest(d) for d in digests], f"S{ROW_DIGEST_BYTES}")
        return self._digests.contains(probe)

    def may_have_committed_ids(self, keys: Sequence[str]) -> np.ndarray:
        """Whether each of ``keys``' hash is a committed id's (the store tells whether it is)."""
        if not len(self._id_hashes):
            return np.zeros(len(keys), bool)
        return self._id_hashes.contains(np.fromiter(map(key_hash, keys), np.uint64, len(keys)))


class _Committer:
    """Commits in a thread of their own, one at a time, so that the client goes on receiving
    results and submitting tasks while rows are written: the workers keep describing. A commit
    waits for the one before it (at most two chunks of rows are held), and a failed commit
    raises in the next `commit` or on leaving; ``committed`` is told each commit done."""

    def __init__(
        self,
        store: FeatureStore,
        split: str,
        summary: dict[str, Any],
        committed: Callable[[_Pending], None] = lambda _: None,
    ) -> None:
        self._store, self._split, self._summary = store, split, summary
        self._committed = committed
        self._batch_ids: list[str] = []
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="commit")
        self._running: Future | None = None
        self._counts: dict[str, Any] = {}
        self.committing = _Pending()
        """The rows and refusals of the commit running, not yet counted in the summary."""
        self.taken = _Taken()
        """The ids and bytes of every image this ingest has taken, committed or pending."""

    def commit(self, pending: _Pending) -> None:
        self.wait()
        self.taken.next_commit()
        self.committing = pending
        self._counts = {
            "rows": 0,
            "refused": 0,
            "commits": 0,
            "already_stored": 0,
            "commit_seconds": 0.0,
        }
        self._running = self._thread.submit(
            _commit, self._store, pending, self._split, self._counts, self._batch_ids
        )

    def wait(self) -> None:
        """Wait for the commit running, then count it in the summary."""
        if self._running is not None:
            running, self._running = self._running, None
            running.result()
            for key, value in self._counts.items():
                self._summary[key] += value
            self._committed(self.committing)
        self.committing = _Pending()

    def __enter__(self) -> _Committer:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.wait()
        finally:
            self._thread.shutdown(wait=True)


def _named_holders(
    store: FeatureStore, repeats: list[tuple[str, bytes]], batch_ids: Sequence[str]
) -> list[tuple[str, bytes, str]]:
    """Refusals of the images (key, sha256) of ``repeats``, whose bytes a row this ingest
    committed before holds, each naming that row's id. Only this ingest's batches
    (``batch_ids``) are read, one at a time, the latest first, until every repeat is named: the
    client never holds the store's digests."""
    wanted = {row_digest(digest) for _, digest in repeats}
    holders: dict[bytes, str] = {}
    for batch_id in reversed(batch_ids):
        content = store.content_hashes([batch_id])
        column = content.column("sha256")
        held = content.filter(pc.is_in(column, value_set=pa.array(list(wanted), column.type)))
        digests, ids = held.column("sha256").to_pylist(), held.column("id").to_pylist()
        holders.update(zip(digests, ids, strict=True))
        wanted -= holders.keys()
        if not wanted:
            break
    return [
        (key, digest, f"same bytes as {holders[row_digest(digest)]!r}, in this ingest")
        if row_digest(digest) in holders
        else (key, digest, "same bytes as an image this ingest committed")
        for key, digest in repeats
    ]


def _commit(
    store: FeatureStore,
    pending: _Pending,
    split: str,
    summary: dict[str, Any],
    batch_ids: list[str],
) -> None:
    """One commit of the pending rows and refusals (nothing if there are none), whose batch id
    is added to ``batch_ids``, those of this ingest's commits. Rows whose key another writer
    committed meanwhile are dropped and counted as ``already_stored``: another ingest of the
    same images put them in the store first."""
    if pending.same_bytes_as_committed:
        pending.refused += _named_holders(store, pending.same_bytes_as_committed, batch_ids)
    if pending.refused:
        before = store.rejected()
        already = set(
            zip(before.column("key").to_pylist(), before.column("sha256").to_pylist(), strict=True)
        )
        pending.refused = [r for r in pending.refused if (r[0], r[1]) not in already]
    if not len(pending) and not pending.refused:
        return
    started = time.perf_counter()
    batch = hashlib.sha256()
    for key, digest in zip(pending.keys, pending.digests, strict=True):
        batch.update(key.encode() + b"\0" + digest)
    for key, digest, reason in pending.refused:
        batch.update(key.encode() + b"\0" + digest + reason.encode())
    batch_id = f"images-{batch.hexdigest()[:16]}"
    batch_ids.append(batch_id)
    with store.writer(batch_id) as writer:
        if writer.already_committed:  # the same rows and refusals, committed by another ingest
            summary["already_stored"] += len(pending)
            return
        keys = np.array(pending.keys, dtype=object)
        fresh = ~store.has_ids(pending.keys) if len(keys) else np.zeros(0, bool)
        taken_before = ~fresh & np.isin(keys, list(pending.ids_maybe_committed))
        pending.refused += [
            (keys[i], pending.digests[i], f"id {keys[i]!r} is another image's, in this ingest")
            for i in np.flatnonzero(taken_before)
        ]
        summary["already_stored"] += int((~fresh & ~taken_before).sum())
        rows = np.concatenate(pending.rows) if pending.rows else np.empty((0, store.dim))
        labels = np.array(pending.labels, dtype=object)
        digests = np.array(pending.digests, dtype=object)
        labelled = np.array([label is not None for label in pending.labels], dtype=bool)
        for part in (fresh & labelled, fresh & ~labelled):
            if part.any():
                writer.write(
                    rows[part],
                    labels[part].astype(str) if labelled[part].all() else None,
                    keys[part].astype(str),
                    split,
                    sha256=list(digests[part]),
                )
        if pending.refused:
            refused_keys, refused_digests, reasons = zip(*pending.refused, strict=True)
            writer.reject(list(refused_keys), list(refused_digests), list(reasons), split)
        summary["rows"] += int(fresh.sum())
        summary["refused"] += len(pending.refused)
        summary["commits"] += int(bool(fresh.any() or pending.refused))
    summary["commit_seconds"] += time.perf_counter() - started
