"""Bytes on disk: feature stores (zarr rows + parquet row metadata), PQ stores, saved models.

Other layers use only the names listed here; zarr and parquet details stay inside.

- Stores: `create_store`, `create_coded_store`, `create_or_open` (atomic, removed again if the
  first write fails), `open_store`, `FeatureStore` (read rows, labels, codes; append through
  `FeatureStore.writer`; `FeatureStore.record_pq_statistics`).
- Files of vectors read in row blocks (.npy, .npz, parquet, idx, .fvecs, .bvecs; `FORMATS`):
  `open_source`, a `Source`; a row's content digest as rows carry it: `row_digest`,
  `as_digests`.
- Forgetting single rows by id or image digest in one commit (a row-level tombstone):
  `forget_rows` (`FeatureStore.forget`).
- Rewriting a store without its removed and forgotten rows, crash-safely: `compact_store`.
- What a store gained and lost since a model recorded its batches (`imgscale update`):
  `rows_changed_since`, a `StoreChange`; the rows it names are read by
  `FeatureStore.features_at` and `FeatureStore.codes_at`.
- Copying a store chunk-parallel (`imgscale compress`): `CopyWriter`, `write_row_chunk`.
- Coded stores: a codec is any `RowCodec`, found by its encoding's ``imgscale.codecs`` entry
  point (storage/row_codecs.py; product quantization's is ``pq``); this layer imports no codec.
  `FeatureStore.stored_rows` and `FeatureStore.codec` read rows as kept and decode them
  whatever the encoding.
- Saved models: `SavedStep`, `save_model` (``replace=True`` swaps atomically), `load_model`.
- Where stores and models live: `location` (a local `Path`, or a `UPath` for an ``s3://``,
  ``gs://``... URL), `is_url`, `use_storage_options` (fsspec options for a block of work;
  `current_storage_options`),
  `publish_file` (a finished local file moved whole to a local path or an object store).
- `FileLock`: an exclusive flock released when its holder dies.
- `Ledger`, `OUTCOMES`: the record of computing runs, in a folder or object-store prefix.
"""

from typing import TYPE_CHECKING

from imgscale.exports import declared_exports, lazy_exports

# The exported names, each imported from its module when first used (imgscale.exports): a command
# that never opens a store does not pay for zarr, dask and pyarrow. Static readers (type
# checkers, IDEs, import-linter) read these imports as written; at run time they only list what
# `lazy_exports` serves.
if TYPE_CHECKING:
    from imgscale.storage.changes import StoreChange as StoreChange
    from imgscale.storage.changes import rows_changed_since as rows_changed_since
    from imgscale.storage.classes import read_class_names as read_class_names
    from imgscale.storage.compact import compact_store as compact_store
    from imgscale.storage.create import create_coded_store as create_coded_store
    from imgscale.storage.create import create_or_open as create_or_open
    from imgscale.storage.create import create_store as create_store
    from imgscale.storage.errors import StoreError as StoreError
    from imgscale.storage.export import export_rows as export_rows
    from imgscale.storage.forget import forget_rows as forget_rows
    from imgscale.storage.formats import FORMATS as FORMATS
    from imgscale.storage.formats import Source as Source
    from imgscale.storage.formats import open_source as open_source
    from imgscale.storage.fs import absolute as absolute
    from imgscale.storage.fs import current_storage_options as current_storage_options
    from imgscale.storage.fs import is_url as is_url
    from imgscale.storage.fs import location as location
    from imgscale.storage.fs import publish_file as publish_file
    from imgscale.storage.fs import use_storage_options as use_storage_options
    from imgscale.storage.ids import HashRuns as HashRuns
    from imgscale.storage.ids import id_hashes as id_hashes
    from imgscale.storage.images.decode import ImageRejected as ImageRejected
    from imgscale.storage.images.decode import ImageRequest as ImageRequest
    from imgscale.storage.images.decode import decode_image as decode_image
    from imgscale.storage.images.listing import file_sha256 as file_sha256
    from imgscale.storage.images.listing import image_files as image_files
    from imgscale.storage.images.listing import local_file_stats as local_file_stats
    from imgscale.storage.images.listing import read_listing as read_listing
    from imgscale.storage.images.listing import read_whole_files as read_whole_files
    from imgscale.storage.images.listing import stat_files as stat_files
    from imgscale.storage.images.listing import write_listing as write_listing
    from imgscale.storage.images.listing import write_whole_files as write_whole_files
    from imgscale.storage.images.source_types import IMAGE_EXTENSIONS as IMAGE_EXTENSIONS
    from imgscale.storage.images.source_types import EncodedImage as EncodedImage
    from imgscale.storage.images.source_types import ImagePartition as ImagePartition
    from imgscale.storage.images.source_types import ImageSource as ImageSource
    from imgscale.storage.images.sources import open_image_source as open_image_source
    from imgscale.storage.images.sources import read_partition as read_partition
    from imgscale.storage.layout import ROW_DIGEST_BYTES as ROW_DIGEST_BYTES
    from imgscale.storage.layout import default_rows_per_chunk as default_rows_per_chunk
    from imgscale.storage.layout import image_rows_per_chunk as image_rows_per_chunk
    from imgscale.storage.layout import row_digest as row_digest
    from imgscale.storage.ledger import OUTCOMES as OUTCOMES
    from imgscale.storage.ledger import Ledger as Ledger
    from imgscale.storage.lock import FileLock as FileLock
    from imgscale.storage.row_codecs import RowCodec as RowCodec
    from imgscale.storage.saved_models import SavedStep as SavedStep
    from imgscale.storage.saved_models import load_model as load_model
    from imgscale.storage.saved_models import save_model as save_model
    from imgscale.storage.store import SCHEMA_VERSION as SCHEMA_VERSION
    from imgscale.storage.store import FeatureStore as FeatureStore
    from imgscale.storage.store import open_store as open_store
    from imgscale.storage.validate import as_digests as as_digests
    from imgscale.storage.writer import CopyWriter as CopyWriter
    from imgscale.storage.writer import write_row_chunk as write_row_chunk

_EXPORTS = declared_exports(__name__, __file__)

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
