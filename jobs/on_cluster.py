"""The cluster preamble of a use case that reads a store: open it where the workers see it,
refuse the splits it lacks before any cluster starts, then connect to a cluster sized by it (and,
for a saved model applied to it, load the model and check the store against it)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sklearn.base import BaseEstimator

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


@contextlib.contextmanager
def model_on_cluster(
    model: str,
    store: str,
    scheduler: str | None,
    *,
    quiet: bool,
    splits: Iterable[str | None] = (),
    warn: Callable[[str], None] | None = None,
) -> Iterator[tuple[BaseEstimator, dict[str, Any], FeatureStore]]:
    """What a use case applying a saved model to a store does first: load MODEL (refused if
    damaged), open STORE on the cluster as `store_on_cluster` does, and refuse a store whose
    rows are described otherwise than those the model learned from. ``warn`` is told of the
    batches the model learned from that the store no longer holds as they were. Yields the
    model, its provenance and the open store."""
    from imgscale.jobs import models

    fitted, provenance = models.load(model)
    with store_on_cluster(store, scheduler, quiet=quiet, splits=splits) as feature_store:
        models.check_store_features(provenance, feature_store, model)
        changes = None if warn is None else models.store_changes(provenance, feature_store, model)
        if changes is not None:
            warn(changes)
        yield fitted, provenance, feature_store
