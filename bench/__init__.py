"""The benchmark harness of ``imgscale bench``: registry, runner, results table, reports and the
documents generated from them, and the benchmarks a user runs on their own cluster and data.

A benchmark module, this package's own or another distribution's (registered under the
``imgscale.benchmarks`` entry point group, as the papers' reproductions are), uses the names
below: :func:`benchmark` registers ``suite(ctx: Context) -> records``, :func:`record` makes each
figure beside its peer, :class:`Skipped` says why it cannot run here; :func:`repetitions` is how
many times the run's scale repeats a speed measurement and :func:`interleaved` runs ours and its
peer in turn that many rounds; :func:`mixture_store`, :func:`mixture_blocks` and
:class:`PeakRSS` build synthetic stores and sample peak RSS; :func:`ingest_runs` times image
ingests on a fresh cluster in a process of their own, and :func:`cifar_table` gives the first
CIFAR-10 images (digits drawn as images at tiny scale).
"""

from typing import TYPE_CHECKING

from imgscale.exports import declared_exports, lazy_exports

# Imported from their modules when first used (imgscale.exports): `imgscale --help`, which loads
# the bench command, does not pay for numpy, pyarrow and the storage layer.
if TYPE_CHECKING:
    from imgscale.bench.common import PeakRSS as PeakRSS
    from imgscale.bench.common import interleaved as interleaved
    from imgscale.bench.common import mixture_blocks as mixture_blocks
    from imgscale.bench.common import mixture_store as mixture_store
    from imgscale.bench.common import record as record
    from imgscale.bench.common import repetitions as repetitions
    from imgscale.bench.images import cifar_table as cifar_table
    from imgscale.bench.images import ingest_runs as ingest_runs
    from imgscale.bench.registry import Context as Context
    from imgscale.bench.registry import Skipped as Skipped
    from imgscale.bench.registry import benchmark as benchmark

_EXPORTS = declared_exports(__name__, __file__)

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
