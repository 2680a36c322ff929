"""Product quantization: the codec of PQ stores and the math on its codes.

- `PQCodec` (`codec.py`): train on a sample, encode and decode rows, the state a store keeps
  beside the codes, and the row statistics of codes a classifier asks of a codec.
- `on_codes.py`: kernels on codes that never decode them: `code_row_stats` (class sums) and
  `adc_search` (ADC nearest-neighbour search).

The storage layer finds `PQCodec` by the ``imgscale.codecs`` entry point ``pq``
(pyproject.toml) and uses it only through its `RowCodec` protocol (storage/row_codecs.py).

Each name is imported from its module when first used (imgscale.exports): a store opened to
read or describe its rows imports the codec alone, neither numba nor dask.
"""

from typing import TYPE_CHECKING

from imgscale.exports import declared_exports, lazy_exports

if TYPE_CHECKING:
    from imgscale.pipeline.pq.codec import DEFAULT_SAMPLE as DEFAULT_SAMPLE
    from imgscale.pipeline.pq.codec import KSUB as KSUB
    from imgscale.pipeline.pq.codec import MIN_TRAIN_PER_CENTROID as MIN_TRAIN_PER_CENTROID
    from imgscale.pipeline.pq.codec import PQCodec as PQCodec
    from imgscale.pipeline.pq.codec import check_m as check_m
    from imgscale.pipeline.pq.codec import check_training_rows as check_training_rows
    from imgscale.pipeline.pq.codec import random_rotation as random_rotation
    from imgscale.pipeline.pq.codec import sample_indices as sample_indices
    from imgscale.pipeline.pq.on_codes import adc_search as adc_search
    from imgscale.pipeline.pq.on_codes import chunk_code_stats as chunk_code_stats
    from imgscale.pipeline.pq.on_codes import code_row_stats as code_row_stats
    from imgscale.pipeline.pq.on_codes import index_pq as index_pq

_EXPORTS = declared_exports(__name__, __file__)

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
