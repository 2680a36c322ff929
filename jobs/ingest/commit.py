"""The client's side of an image ingest: each partition's outcome received (`receive`), an id
or bytes this ingest took already refused, and the rows committed to the store a chunk at a time
in a thread of their own (`Committer`), so that the workers keep describing while rows are
written.

The client holds, for every image this ingest took, 24 bytes (`Taken`): an image repeating an
earlier one's id or bytes is refused naming the first, and the store confirms what the hashes
only suggest when the rows are committed (`commit_pending`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from imgscale.jobs.ingest.known import EMPTY_SHA256, committed_holders, key_hash
from imgscale.jobs.ingest.worker import Described
from imgscale.storage import ROW_DIGEST_BYTES, FeatureStore, HashRuns, row_digest

# A commit at least this often, so a killed run loses at most this much work.
COMMIT_SECONDS = 60.0


@dataclass
class Pending:
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


def receive(pending: Pending, result: Described, taken: Taken) -> None:
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


class Taken:
    """The ids and bytes of the images one ingest has taken, so that an image repeating an
    earlier one's is refused, in memory that does not grow by a Python object an image.

    The images of the rows not yet in the store (those pending and those being committed: at
    most two commits' worth, `Committer`) are held exactly, each digest with its id. Once a
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


class Committer:
    """Commits in a thread of their own, one at a time, so that the client goes on receiving
    results and submitting tasks while rows are written: the workers keep describing. A commit
    waits for the one before it (at most two chunks of rows are held), and a failed commit
    raises in the next `commit` or on leaving; ``committed`` is told each commit done."""

    def __init__(
        self,
        store: FeatureStore,
        split: str,
        summary: dict[str, Any],
        committed: Callable[[Pending], None] = lambda _: None,
    ) -> None:
        self._store, self._split, self._summary = store, split, summary
        self._committed = committed
        self._batch_ids: list[str] = []
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="commit")
        self._running: Future | None = None
        self._counts: dict[str, Any] = {}
        self.committing = Pending()
        """The rows and refusals of the commit running, not yet counted in the summary."""
        self.taken = Taken()
        """The ids and bytes of every image this ingest has taken, committed or pending."""

    def commit(self, pending: Pending) -> None:
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
            commit_pending, self._store, pending, self._split, self._counts, self._batch_ids
        )

    def wait(self) -> None:
        """Wait for the commit running, then count it in the summary."""
        if self._running is not None:
            running, self._running = self._running, None
            running.result()
            for key, value in self._counts.items():
                self._summary[key] += value
            self._committed(self.committing)
        self.committing = Pending()

    def __enter__(self) -> Committer:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.wait()
        finally:
            self._thread.shutdown(wait=True)


def named_holders(
    store: FeatureStore, repeats: list[tuple[str, bytes]], batch_ids: Sequence[str]
) -> list[tuple[str, bytes, str]]:
    """Refusals of the images (key, sha256) of ``repeats``, whose bytes a row this ingest
    committed before holds, each naming that row's id. Only this ingest's batches
    (``batch_ids``) are read, one at a time, the latest first, until every repeat is named: the
    client never holds the store's digests."""
    wanted = {row_digest(digest) for _, digest in repeats}
    holders: dict[bytes, str] = {}
    for batch_id in reversed(batch_ids):
        probe = sorted(wanted)
        held = committed_holders(store.content_hashes([batch_id]), probe).column("id").to_pylist()
        holders.update((d, i) for d, i in zip(probe, held, strict=True) if i is not None)
        wanted -= holders.keys()
        if not wanted:
            break
    return [
        (key, digest, f"same bytes as {holders[row_digest(digest)]!r}, in this ingest")
        if row_digest(digest) in holders
        else (key, digest, "same bytes as an image this ingest committed")
        for key, digest in repeats
    ]


def commit_pending(
    store: FeatureStore,
    pending: Pending,
    split: str,
    summary: dict[str, Any],
    batch_ids: list[str],
) -> None:
    """One commit of the pending rows and refusals (nothing if there are none), whose batch id
    is added to ``batch_ids``, those of this ingest's commits. Rows whose key another writer
    committed meanwhile are dropped and counted as ``already_stored``: another ingest of the
    same images put them in the store first."""
    if pending.same_bytes_as_committed:
        pending.refused += named_holders(store, pending.same_bytes_as_committed, batch_ids)
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
