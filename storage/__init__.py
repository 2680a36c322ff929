"""Bytes on disk: feature stores (zarr rows + parquet row metadata), PQ stores, saved models.

Other layers use only the names listed here; zarr and parquet details stay inside.

- Stores: `create_store`, `create_pq_store`, `create_or_open` (atomic, removed again if the
  first write fails), `open_store`, `FeatureStore` (read rows, labels, codes; append through
  `FeatureStore.writer`; `FeatureStore.record_pq_statistics`), `ingest_file`.
- Copying a store chunk-parallel (`imgscale compress`): `CopyWriter`, `write_row_chunk`.
- Coded stores: a PQ store's codec is `imgscale.pipeline.pq_codec.PQCodec`, found by its
  encoding's ``imgscale.codecs`` entry point (storage/row_codecs.py); this layer imports no codec.
- Saved models: `SavedStep`, `save_model` (``replace=True`` swaps atomically), `load_model`.
- Where stores and models live: `location` (a local `Path`, or a `UPath` for an ``s3://``,
  ``gs://``... URL), `is_url`, `use_storage_options` (fsspec options for a block of work;
  `current_storage_options`),
  `publish_file` (a finished local file moved whole to a local path or an object store).
- `FileLock`: an exclusive flock released when its holder dies.
- `Ledger`, `OUTCOMES`: the per-user record of computing runs.
"""

from imgscale.exports import lazy_exports

# Exported name → the module defining it, imported on first use (imgscale.exports): a command
# that never opens a store does not pay for zarr, dask and pyarrow.
_EXPORTS = {
    "read_class_names": "classes",
    "create_or_open": "create",
    "create_pq_store": "create",
    "create_store": "create",
    "StoreError": "errors",
    "export_rows": "export",
    "FORMATS": "ingest",
    "Ingested": "ingest",
    "ingest_file": "ingest",
    "OUTCOMES": "ledger",
    "Ledger": "ledger",
    "current_storage_options": "fs",
    "is_url": "fs",
    "location": "fs",
    "publish_file": "fs",
    "use_storage_options": "fs",
    "id_hashes": "ids",
    "ImageRejected": "images.decode",
    "ImageRequest": "images.decode",
    "decode_image": "images.decode",
    "IMAGE_EXTENSIONS": "images.source_types",
    "EncodedImage": "images.source_types",
    "ImagePartition": "images.source_types",
    "ImageSource": "images.source_types",
    "open_image_source": "images.sources",
    "read_partition": "images.sources",
    "FileLock": "lock",
    "SavedStep": "models",
    "load_model": "models",
    "save_model": "models",
    "SCHEMA_VERSION": "store",
    "FeatureStore": "store",
    "open_store": "store",
    "CopyWriter": "writer",
    "write_row_chunk": "writer",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
