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
committed whole are recorded in the store (`jobs.ingest.whole_files`): an ingest that finds them
unchanged reads none of them, where it would otherwise read every shard through to learn its
keys. An image whose bytes are already committed under another key (a renamed or copied file,
the same photo in another split) is not decoded again: it is refused as a duplicate, with the key
it duplicates. Refused images go to the store's table of rejects (`imgscale info --rejected`); a
refused image that is fixed is read again by the next run.

Each commit runs in a thread of its own (`Committer`), while the client goes on receiving
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

import contextlib
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from imgscale.jobs.feature_records import spelling
from imgscale.jobs.ingest.changes import forget_changed, keep_listing
from imgscale.jobs.ingest.codec import StageProgress, train_codec
from imgscale.jobs.ingest.commit import COMMIT_SECONDS, Committer, Pending, receive
from imgscale.jobs.ingest.plan import (
    IMAGES_PER_PARTITION,
    IngestPlan,
    open_existing,
    plan_ingest,
    pq_of,
    starts_a_store,
)
from imgscale.jobs.ingest.worker import describe_and_encode
from imgscale.storage import (
    create_coded_store,
    create_or_open,
    create_store,
    default_rows_per_chunk,
    image_rows_per_chunk,
    is_url,
    open_store,
)

# Tasks in flight per worker thread: enough to keep every core busy while results come back.
TASKS_PER_THREAD = 2


def ingest_image_source(
    source: str,
    store_path: Any,
    *,
    features: str | None,
    split: str,
    scheduler: str | None,
    quiet: bool,
    commit_rows: int | None,
    refresh: bool,
    source_options: dict[str, str],
    progress: Callable[[int, int | None, int, int], None] | None = None,
    codec_progress: StageProgress | None = None,
    **pq_options: Any,
) -> dict[str, Any]:
    """``imgscale ingest SOURCE STORE`` of images (absolute paths, as every worker sees them):
    plan, with ``refresh`` forget the rows of changed and deleted files first, describe and
    commit the new images on the cluster of ``scheduler`` (or a LocalCluster started as soon as
    a new store is known to need it), and keep the source's listing for the next ingest;
    returns the summary (``forgotten``: rows of changed files forgotten). ``pq_options`` are
    `plan_ingest`'s ``pq``, ``pq_sample``. The cluster (distributed, dask.array) is imported
    only when there is work, so that an ingest with nothing new stays a quick look."""
    # Partitions no larger than a commit, so that a commit holds at most --commit-rows rows.
    per_partition = min(IMAGES_PER_PARTITION, commit_rows or IMAGES_PER_PARTITION)
    options = {"features": features, "source_options": source_options, "split": split,
               "images_per_partition": per_partition, **pq_options}  # fmt: skip
    with contextlib.ExitStack() as stack:
        early = None
        if not scheduler and starts_a_store(store_path):  # every image is new: start it now
            from imgscale.jobs.cluster import local_cluster_soon

            early = stack.enter_context(local_cluster_soon())
        plan = plan_ingest(source, store_path, **options)
        forgotten = 0
        if refresh and plan.changes is not None and (plan.changes.changed or plan.changes.deleted):
            forgotten = forget_changed(open_store(store_path), plan.changes)
            plan = plan_ingest(source, store_path, **options)
        if not plan.partitions and plan.total == 0:  # every image listed is in the store
            summary = nothing_to_do(plan)
        else:
            from imgscale.jobs.cluster import connect

            local = [Path(source)] if not is_url(source) and Path(source).exists() else []
            shared = [*local, store_path.parent]
            with connect(scheduler, quiet=quiet, shared_paths=shared, cluster=early) as client:
                summary = ingest_images(
                    plan,
                    client,
                    commit_rows=commit_rows,
                    progress=progress,
                    codec_progress=codec_progress,
                )
    summary["forgotten"] = forgotten
    keep_listing(store_path, source, plan.changes)
    return summary


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
    from imgscale.jobs.cluster import stream_map, worker_threads
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
            create_coded_store, codec=codec, descriptor=described_by.record,
            provenance=provenance, source=source,
        )  # fmt: skip
    summary = {"images_seen": 0, "rows": 0, "refused": 0, "commits": 0, "partitions": 0,
               "already_stored": 0, "commit_seconds": 0.0}  # fmt: skip
    with create_or_open(plan.store_path, create) as (store, _):
        check_same_features(store.descriptor, described_by, str(plan.store_path))
        # The store's own codec: another ingest may have created the store meanwhile.
        codec = pq_of(described_by, store, plan.pq, str(plan.store_path))[1]
        commit_rows = commit_rows or max(store.rows_per_chunk, default_rows_per_chunk(store.dim))
        threads = worker_threads(client) if plan.partitions else 1
        pending, last_commit = Pending(), time.monotonic()
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

        def committed(pending: Pending) -> None:
            if whole is not None:
                whole.committed(pending.source_files, pending.unreadable_files)
                if whole.news:
                    whole.keep(store)

        with Committer(store, plan.split, summary, committed) as committer:
            for result in results:
                summary["partitions"] += 1
                summary["images_seen"] += result.images_seen
                if len(pending) and len(pending) + len(result.keys) > commit_rows:
                    committer.commit(pending)  # a commit holds ≤ commit_rows
                    pending, last_commit = Pending(), time.monotonic()
                receive(pending, result, committer.taken)
                if len(pending) >= commit_rows or time.monotonic() - last_commit > COMMIT_SECONDS:
                    committer.commit(pending)
                    pending, last_commit = Pending(), time.monotonic()
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
    store = open_existing(plan.store_path)
    summary = {"images_seen": 0, "rows": 0, "refused": 0, "commits": 0, "partitions": 0,
               "already_stored": 0, "commit_seconds": 0.0}  # fmt: skip
    summary["store_rows"] = store.committed_rows if store is not None else 0
    if store is not None and plan.whole_files is not None and plan.whole_files.news:
        plan.whole_files.keep(store)
    return finish_summary(plan, summary, store.descriptor if store is not None else None)
