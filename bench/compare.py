"""Which figures of two results tables got better or worse beyond their noise
(``imgscale bench --compare OLD NEW``).

Figures are matched by benchmark, name, scale and unit (a name recorded in two units is two
figures). A figure measured several times stands for the interval of its repetitions,
[``value_min``, ``value_max``]: when the old and the new interval do not overlap the figure
changed, better or worse as its unit says (:func:`direction`); when they overlap the change is
within noise. A figure measured once (an accuracy, a count, any figure of a table written before
figures had repetitions) has no interval of its own: where either side was measured once, the
intervals must stand apart by more than :data:`TOLERANCE` of the old value, so two single
figures differ when they are more than 10% apart. A figure whose run in either table was noisy
(:mod:`imgscale.bench.calibration`) is said to be noisy instead of compared, and a figure of one
table only is added or removed.
"""

from __future__ import annotations

from dataclasses import dataclass

TOLERANCE = 0.10
"""The gap, relative to the old value, a figure measured once must move by: the calibration's
limit of a quiet machine's drift, so a single timing is not called a change for moving less than
the machine may between two calibrations."""

VERDICTS = ("worse", "better", "changed", "noisy", "within noise", "added", "removed")
"""Every verdict, in the order they are listed; "changed": beyond the noise in a unit whose
better direction is not known."""

LOWER_IS_BETTER = frozenset(
    {"s", "ms", "s per 1M rows", "s/GiB", "GiB", "bytes", "error", "sq. distance", "relative"}
)
"""Units of times, memory, sizes, errors and differences from a reference."""
HIGHER_IS_BETTER = frozenset(
    {
        "GB/s", "GFLOP/s", "images/s", "rows/s", "descriptors/s", "vectors/s", "codes/s",
        "batches/s", "iterations/s", "it/s", "x", "rate", "per-class rate", "validation rate",
        "MiAP", "accuracy",
    }
)  # fmt: skip
"""Units of rates, speed-ups and accuracies."""


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


@dataclass(frozen=True)
class Difference:
    """One figure of either table and what became of it."""

    benchmark: str
    name: str
    scale: str
    unit: str
    verdict: str
    old: dict | None
    new: dict | None

    @property
    def change(self) -> float | None:
        """The new median over the old, less 1; None without both or from zero."""
        if self.old is None or self.new is None or not self.old["value"]:
            return None
        return self.new["value"] / self.old["value"] - 1


def compare(old: list[dict], new: list[dict], tolerance: float = TOLERANCE) -> list[Difference]:
    """Every figure of ``old`` and ``new`` (results-table rows) with its verdict, in ``new``'s
    order, then the removed ones in ``old``'s."""
    before = {_key(r): r for r in old}
    after = {_key(r): r for r in new}
    out = [Difference(*key, _verdict(before.get(key), row, tolerance), before.get(key), row)
           for key, row in after.items()]  # fmt: skip
    out += [
        Difference(*key, "removed", row, None) for key, row in before.items() if key not in after
    ]
    return out


def interval(row: dict) -> tuple[float, float]:
    """The values the figure stands for: its repetitions' extremes, or its one value."""
    if _repeated(row) and row.get("value_min") is not None:
        return row["value_min"], row["value_max"]
    return row["value"], row["value"]


def _repeated(row: dict) -> bool:
    return (row.get("repeats") or 1) > 1


def _verdict(old: dict | None, new: dict, tolerance: float) -> str:
    if old is None:
        return "added"
    if old.get("noisy") or new.get("noisy"):
        return "noisy"
    (old_low, old_high), (new_low, new_high) = interval(old), interval(new)
    gap = 0.0 if _repeated(old) and _repeated(new) else tolerance * abs(old["value"])
    if new_low <= old_high + gap and old_low - gap <= new_high:
        return "within noise"
    sign = direction(new["unit"], new["name"])
    if sign == 0:
        return "changed"
    return "better" if (new_low > old_high) == (sign > 0) else "worse"


def _key(row: dict) -> tuple[str, str, str, str]:
    return row["benchmark"], row["name"], row["scale"], row["unit"]
