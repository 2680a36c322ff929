"""The fitted arrays an estimator declares, and the check that a set of arrays fits together.

Each estimator class lists its fitted arrays once, in ``_fitted_shapes``: array name → shape, one
symbol an axis. A loaded model's checksums prove its arrays are the ones saved, not that they fit
together (a file written by another tool, or a hand-edited one); `check_fitted_shapes` refuses
any array whose shape disagrees with

- ``D``, the feature count (``n_features_in_``), ``K``, the output dimension (``n_components_``),
  ``C``, the classes (the length of ``classes_``),
- a parameter named in the shape (``n_components``),
- any other letter: a size the arrays must agree on among themselves (the first array that has it
  sets it); ``None`` is any size.
"""

from __future__ import annotations

from typing import Any

Shape = tuple[str | None, ...]

# Sizes read from the estimator's fitted scalars rather than from its arrays.
_KNOWN = {"D": "n_features_in_", "K": "n_components_"}


def fitted_shapes(cls: type) -> dict[str, Shape] | None:
    """The fitted arrays ``cls`` declares (name → shape), or None if it declares none."""
    return getattr(cls, "_fitted_shapes", None)


def check_fitted_shapes(
    kind: str,
    shapes: dict[str, Shape],
    params: dict[str, Any],
    scalars: dict[str, Any],
    arrays: dict[str, Any],
) -> None:
    """ValueError (one line naming ``kind``, the array and the expected shape) unless every
    array of ``arrays`` that ``shapes`` declares has that shape; undeclared arrays are not
    checked."""
    # symbol → (size, where the size comes from)
    sizes: dict[str, tuple[int, str]] = {}
    for symbol, attribute in _KNOWN.items():
        value = scalars.get(attribute)
        if isinstance(value, int):
            sizes[symbol] = (value, f"{attribute} = {value}")
    if "classes_" in arrays and len(arrays["classes_"].shape) == 1:
        sizes["C"] = (arrays["classes_"].shape[0], f"{arrays['classes_'].shape[0]} classes")
    for name, value in params.items():
        if isinstance(value, int) and not isinstance(value, bool):
            sizes[name] = (value, f"parameter {name} = {value}")
    for name, shape in shapes.items():
        if name not in arrays:  # the file's own record of its arrays is checked on load
            continue
        actual = tuple(arrays[name].shape)
        expected = tuple(sizes[s][0] if s in sizes else s or "any" for s in shape)
        wrong = len(actual) != len(shape) or any(
            isinstance(want, int) and got != want
            for got, want in zip(actual, expected, strict=True)
        )
        if wrong:
            if len(actual) == len(shape):  # a size no other array sets is as found
                pairs = zip(expected, actual, strict=True)
                expected = tuple(want if isinstance(want, int) else got for want, got in pairs)
            because = sorted({sizes[s][1] for s in shape if s in sizes})
            raise ValueError(
                f"{kind} array {name!r} has shape {actual}; expected {expected}"
                + (f" ({', '.join(because)})" if because else "")
            )
        for symbol, size in zip(shape, actual, strict=True):
            if symbol is not None and symbol not in sizes:
                sizes[symbol] = (size, f"{symbol} = {size} from {name!r}")
