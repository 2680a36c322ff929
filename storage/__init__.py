"""Bytes on disk: feature stores (zarr features + parquet row metadata) and their ingest.

Other layers use only the verbs re-exported here; zarr and parquet details stay inside.
"""

from imgscale.storage.classes import read_class_names
from imgscale.storage.errors import StoreError
from imgscale.storage.ingest import FORMATS, Ingested, ingest_file
from imgscale.storage.ledger import OUTCOMES, Ledger
from imgscale.storage.store import SCHEMA_VERSION, FeatureStore, create_store, open_store

__all__ = [
    "FORMATS",
    "OUTCOMES",
    "SCHEMA_VERSION",
    "FeatureStore",
    "Ingested",
    "Ledger",
    "StoreError",
    "create_store",
    "ingest_file",
    "open_store",
    "read_class_names",
]
