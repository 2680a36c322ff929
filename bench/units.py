"""What a figure's unit says about it: which way is better, and whether a busy machine moves it.

One table for the harness: :mod:`imgscale.bench.compare` reads which way a figure improves, the
suite which figures a noisy run leaves noisy (times and rates: a busy machine makes them slower;
an accuracy, a size or a count it does not change).
"""

from __future__ import annotations

TIMES = frozenset({"s", "ms", "s per 1M rows", "s/GiB"})
"""Units of time taken."""
RATES = frozenset(
    {
        "GB/s", "GFLOP/s", "images/s", "rows/s", "descriptors/s", "vectors/s", "codes/s",
        "batches/s", "iterations/s", "it/s", "x",
    }
)  # fmt: skip
"""Units of work a second, and speed-ups ("x")."""
LOWER_IS_BETTER = TIMES | {"GiB", "bytes", "error", "sq. distance", "relative"}
"""Times, memory, sizes, errors and differences from a reference."""
HIGHER_IS_BETTER = RATES | {"rate", "per-class rate", "validation rate", "MiAP", "accuracy"}
"""Rates, speed-ups and accuracies."""


def timed(unit: str) -> bool:
    """Whether a figure in ``unit`` is a time or a rate: what a busy machine moves."""
    return unit in TIMES or unit in RATES


def direction(unit: str, name: str) -> int:
    """1 when a larger figure is better, -1 when a smaller one is, 0 when not known: by the unit,
    else (a fraction, a percentage) by whether the name says error or accuracy."""
    if unit in LOWER_IS_BETTER:
        return -1
    if unit in HIGHER_IS_BETTER:
        return 1
    words = name.lower()
    if "error" in words:
        return -1
    if "accuracy" in words or "rate" in words:
        return 1
    return 0
