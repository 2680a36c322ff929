"""The cluster preamble of a use case that reads a store: open it where the workers see it,
refuse the splits it lacks before any cluster starts, then connect to a cluster sized by it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from imgscale.storage import FeatureStore


def row_bytes(store: FeatureStore) -> int:
    """Bytes of ``store``'s rows as the float32 its tasks compute on (PQ codes decode to it):
    how `jobs.cluster.connect` chooses the kind of LocalCluster."""
    return store.committed_rows * store.dim * 4


@contextlib.contextmanager
def store_on_cluster(
    store: str,
    scheduler: str | None,
    *,
    quiet: bool,
    splits: Iterable[str | None] = (),
    shared_paths: Iterable[Any] = (),
) -> Iterator[FeatureStore]:
    """What a use case reading a store on the cluster does first: open STORE at the path the
    workers see, refuse each of ``splits`` it has no rows of (before any cluster starts), then
    connect to the cluster (sized by the store's rows; ``shared_paths`` must exist on every
    worker too) for the block. Yields the open store."""
    from imgscale.jobs.cluster import connect, shared_path
    from imgscale.storage import open_store

    feature_store = open_store(shared_path(store))
    for split in splits:
        feature_store.require_split(split)
    with connect(
        scheduler,
        quiet=quiet,
        shared_paths=[feature_store.path, *shared_paths],
        data_bytes=row_bytes(feature_store),
    ):
        yield feature_store
