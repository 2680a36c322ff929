"""Which figures of two results tables got better or worse beyond their noise
(``imgscale bench --compare OLD NEW``).

Figures are matched by benchmark, name, scale and unit (a name recorded in two units is two
figures). A figure measured several times stands for the interval of its repetitions,
[``value_min``, ``value_max``]: when the old and the new interval do not overlap the figure
changed, better or worse as its unit says (:func:`imgscale.bench.units.direction`); when they
overlap the change is within noise. A figure measured once (an accuracy, a count, any figure of
a table written before figures had repetitions) has no interval of its own: where either side
was measured once, a time or a rate must stand apart by more than :data:`TOLERANCE` of the old
value (two single timings differ when they are more than 10% apart), and a figure a busy machine
does not move (an accuracy, a size, a count) by more than :data:`UNTIMED_TOLERANCE` of it: its
seeds are fixed, so what moves it is the code or the data, not the machine. A figure whose run in
either table was noisy (:mod:`imgscale.bench.calibration`) is said to be noisy instead of
compared; a time or a rate whose runs' hosts ran the calibration's GEMM at rates more than
:data:`HOST_TOLERANCE` apart was measured on another machine, though the cores, memory and CPU
name are the same (hosts of one cloud offer differ by half), and is said so rather than called
better or worse. A figure of one table only is added or removed (or not run, when the new
table did not run its benchmark at that scale)."""

from __future__ import annotations

from dataclasses import dataclass

from imgscale.bench.units import direction, timed

TOLERANCE = 0.10
"""The gap, relative to the old value, a figure measured once must move by: the calibration's
limit of a quiet machine's drift, so a single timing is not called a change for moving less than
the machine may between two calibrations."""

UNTIMED_TOLERANCE = 0.005
"""The gap, relative to the old value, a figure no machine's load moves must move by when
measured once: room for floating-point summation order (threads, chunking), not for a change of
method; an accuracy of 0.80 that reads 0.79 has changed."""

HOST_TOLERANCE = 0.10
"""How far apart, relative to the old run's, two runs' GEMM rates may be for their times to be
compared: the calibration's limit of one quiet host's drift (``calibration.DRIFT_LIMIT``, not
imported: ``imgscale --help`` imports this module, and the calibration imports numpy)."""

VERDICTS = (
    "worse", "better", "changed", "noisy", "other machine", "within noise", "added", "removed",
    "not run",
)  # fmt: skip
"""Every verdict, in the order they are listed; "changed": beyond the noise in a unit whose
better direction is not known; "other machine": a time or rate measured on hosts of different
speed (:func:`host_change`); "not run": a figure of a benchmark the new table did not run at
that scale (a run of a few benchmarks against the documents' table), where "removed" is one its
benchmark no longer records."""


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
    before, after = _by_figure(old), _by_figure(new)
    out = [Difference(*key, _verdict(before.get(key), row, tolerance), before.get(key), row)
           for key, row in after.items()]  # fmt: skip
    ran = {(benchmark, scale) for benchmark, _, scale, _ in after}
    out += [
        Difference(*key, "removed" if (key[0], key[2]) in ran else "not run", row, None)
        for key, row in before.items()
        if key not in after
    ]
    return out


def host_change(old: dict, new: dict) -> float | None:
    """The new run's host GEMM rate over the old's, less 1; None where either is unknown (a
    table written before runs recorded it)."""
    if not old.get("gemm_gflops") or not new.get("gemm_gflops"):
        return None
    return new["gemm_gflops"] / old["gemm_gflops"] - 1


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
    host = host_change(old, new)
    if timed(new["unit"]) and host is not None and abs(host) > HOST_TOLERANCE:
        return "other machine"
    (old_low, old_high), (new_low, new_high) = interval(old), interval(new)
    if _repeated(old) and _repeated(new):
        gap = 0.0
    else:
        gap = (tolerance if timed(new["unit"]) else UNTIMED_TOLERANCE) * abs(old["value"])
    if new_low <= old_high + gap and old_low - gap <= new_high:
        return "within noise"
    sign = direction(new["unit"], new["name"])
    if sign == 0:
        return "changed"
    return "better" if (new_low > old_high) == (sign > 0) else "worse"


def _by_figure(rows: list[dict]) -> dict[tuple[str, str, str, str], dict]:
    """Each figure's row; of a figure measured in several runs (a documents' table keeps a quiet
    run beside a newer noisy one), the newest quiet one."""
    out: dict[tuple[str, str, str, str], dict] = {}
    for row in rows:
        key = (row["benchmark"], row["name"], row["scale"], row["unit"])
        if key not in out or _preference(row) >= _preference(out[key]):
            out[key] = row
    return out


def _preference(row: dict) -> tuple[bool, str]:
    return not row.get("noisy"), row["time"] or ""
