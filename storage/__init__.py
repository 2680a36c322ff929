"""Bytes on disk: feature stores (zarr rows + parquet row metadata), PQ stores, saved models.

Other layers use only the names listed here; zarr and parquet details stay inside.

- Stores: `create_store`, `create_pq_store`, `create_or_open` (atomic, removed again if the
  first write fails), `open_store`, `FeatureStore` (read rows, labels, codes; append through
  `FeatureStore.writer`; `FeatureStore.record_pq_statistics`), `ingest_file`.
- Copying a store chunk-parallel (`imgscale compress`): `CopyWriter`, `write_row_chunk`.
- Product quantization: `PQCodec`, `check_m`, `sample_indices`, `DEFAULT_SAMPLE`.
- Saved models: `SavedStep`, `save_model` (``replace=True`` swaps atomically), `load_model`.
- `FileLock`: an exclusive flock released when its holder dies.
- `Ledger`, `OUTCOMES`: the per-user record of computing runs.
"""

from imgscale.storage.classes import read_class_names
from imgscale.storage.create import create_or_open, create_pq_store, create_store
from imgscale.storage.errors import StoreError
from imgscale.storage.ingest import FORMATS, Ingested, ingest_file
from imgscale.storage.ledger import OUTCOMES, Ledger
from imgscale.storage.lock import FileLock
from imgscale.storage.models import SavedStep, load_model, save_model
from imgscale.storage.pq_codec import DEFAULT_SAMPLE, PQCodec, check_m, sample_indices
from imgscale.storage.store import SCHEMA_VERSION, FeatureStore, open_store
from imgscale.storage.writer import CopyWriter, write_row_chunk

__all__ = [
    "DEFAULT_SAMPLE",
    "FORMATS",
    "OUTCOMES",
    "SCHEMA_VERSION",
    "CopyWriter",
    "FeatureStore",
    "FileLock",
    "Ingested",
    "Ledger",
    "PQCodec",
    "SavedStep",
    "StoreError",
    "check_m",
    "create_or_open",
    "create_pq_store",
    "create_store",
    "ingest_file",
    "load_model",
    "open_store",
    "read_class_names",
    "sample_indices",
    "save_model",
    "write_row_chunk",
]
