"""The benchmark harness of ``imgscale bench``: registry, runner, results table, reports and the
documents generated from them, and the benchmarks a user runs on their own cluster and data.

A benchmark module, this package's own or another distribution's (registered under the
``imgscale.benchmarks`` entry point group, as the papers' reproductions are), uses the names
below: :func:`benchmark` registers ``suite(ctx: Context) -> records``, :func:`record` makes each
figure beside its peer, :class:`Skipped` says why it cannot run here; :func:`mixture_store`,
:func:`mixture_blocks` and :class:`PeakRSS` build synthetic stores and sample peak RSS.
"""

from imgscale.bench.common import PeakRSS, mixture_blocks, mixture_store, record
from imgscale.bench.registry import Context, Skipped, benchmark

__all__ = [
    "Context",
    "PeakRSS",
    "Skipped",
    "benchmark",
    "mixture_blocks",
    "mixture_store",
    "record",
]
