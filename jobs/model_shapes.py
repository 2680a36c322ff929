"""The shapes a loaded model's arrays must have, given its parameters: checked before use.

A model file's checksums prove its arrays are the ones saved; they do not prove the arrays fit
together (a file written by another tool, or a hand-edited one). `check_shapes` refuses, in one
line naming the model, the array and the expected shape, any fitted array whose shape disagrees
with the estimator's feature count (``D``, from ``n_features_in_``), its classes (``C``, from
``classes_``), its output dimension (``K``, from ``n_components_``) or a parameter named in the
shape (``n_components``). Any other letter is a size the arrays must agree on among themselves
(the first array that has it sets it); ``None`` is any size.
"""

from __future__ import annotations

import os
from typing import Any

from imgscale.storage import StoreError

Shape = tuple[str | None, ...]

_RIDGE = {
    "coef_": ("C", "D"),
    "intercept_": ("C",),
    "mean_": ("D",),
    "feature_sum_": ("D",),
    "gram_": ("D", "D"),
    "class_sums_": ("C", "D"),
    "class_counts_": ("C",),
}
_NCM = {"class_sums_": ("C", "D"), "class_counts_": ("C",), "means_": ("C", "D")}
_EIGENFUNCTIONS = {
    "components_": ("P", "D"),
    "offset_": ("P",),
    "bin_low_": ("P",),
    "bin_width_": ("P",),
    "bin_counts_": ("P", "B"),
    "clip_low_": ("P",),
    "clip_high_": ("P",),
    "bandwidths_": ("P",),
    "eigenvalues_": ("K",),
    "dims_": ("K",),
    "eigenfunctions_": ("K", "B"),
}

# Class name → fitted array → shape. Every class `jobs.models.MODEL_CLASSES` allows has an
# entry (tests/jobs/test_model_shapes.py checks it).
FITTED_SHAPES: dict[str, dict[str, Shape]] = {
    "RidgeClassifier": _RIDGE,
    "EigenvalueRidgeClassifier": {**_RIDGE, "eigenvalues_": ("D",)},
    "SemiSupervisedEigenSolver": {
        **{name: shape for name, shape in _RIDGE.items() if name != "mean_"},
        "eigenvalues_": ("D",),
    },
    "NearestClassMean": _NCM,
    "MetricNearestClassMean": {
        **_NCM,
        "components_": ("n_components", "D"),
        "projected_means_": ("C", "n_components"),
    },
    "MetricKNeighborsClassifier": {
        "components_": ("n_components", "D"),
        "reference_": ("N", "n_components"),
        "reference_index_": ("N",),
    },
    "PredictedNeighbourhoodClassifier": {
        "training_rows_": ("N", "D"),
        "training_index_": ("N",),
        "sensing_signs_": ("S", "N"),
        "target_mean_": ("S",),
        "neighbourhood_instances_": ("M",),
        "neighbourhood_sizes_": ("M",),
    },
    "ExemplarHOPE": {
        "mean_": ("D",),
        "exemplars_": ("Z", "D"),
        "exemplar_labels_": ("Z",),
        "embedded_exemplars_": ("Z", "K"),
        "factors_": (None, "F"),
        "hidden_weights_": ("F", "H"),
        "hidden_bias_": ("H",),
        "output_weights_": ("K", "H"),
    },
    "RandomFourierFeatures": {"random_weights_": ("D", "K"), "random_offset_": ("K",)},
    "SquareRoot": {},
    "HistogramIntersection": {"max_": ("D",)},
    "Nystrom": {
        "landmarks_": ("L", "D"),
        "landmark_degrees_": ("L",),
        "projection_": ("L", "K"),
        "eigenvalues_": ("K",),
    },
    "AddKPCA": {
        "landmarks_": ("L", "D"),
        "component_vectors_": ("L", "K"),
        "component_dims_": ("K",),
        "eigenvalues_": ("K",),
    },
    "PCA": {
        "components_": ("K", "D"),
        "mean_": ("D",),
        "feature_sum_": ("D",),
        "gram_": ("D", "D"),
        "explained_variance_": ("K",),
    },
    "GaussianRandomProjection": {"components_": ("K", "D")},
    "BagOfWords": {"words_": ("n_words", "W")},
    # Per channel of local descriptors: its PCA and GMM (S: 128-D SIFT, R: 96-D colour).
    "FisherVector": {
        f"{channel}_{name}": shape
        for channel, width in (("sift", "S"), ("color", "R"))
        for name, shape in (
            ("mean_", (width,)),
            ("components_", ("n_components", width)),
            ("weights_", ("n_gaussians",)),
            ("means_", ("n_gaussians", "n_components")),
            ("variances_", ("n_gaussians", "n_components")),
        )
    },
    "PCALap": _EIGENFUNCTIONS,
    "RPLap": _EIGENFUNCTIONS,
    "ALE": _EIGENFUNCTIONS,
}

# Sizes read from the estimator itself rather than from its arrays.
_KNOWN = {"D": "n_features_in_", "K": "n_components_"}


def check_shapes(
    kind: str,
    params: dict[str, Any],
    scalars: dict[str, Any],
    arrays: dict[str, Any],
    where: str | os.PathLike,
) -> None:
    """StoreError unless ``arrays`` have the shapes `FITTED_SHAPES` gives ``kind``."""
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
    for name, shape in FITTED_SHAPES[kind].items():
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
            raise StoreError(
                f"{where}: {kind} array {name!r} has shape {actual}; expected {expected}"
                + (f" ({', '.join(because)})" if because else "")
            )
        for symbol, size in zip(shape, actual, strict=True):
            if symbol is not None and symbol not in sizes:
                sizes[symbol] = (size, f"{symbol} = {size} from {name!r}")
