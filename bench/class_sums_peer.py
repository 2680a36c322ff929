"""The peer of ``imgscale bench overhead``'s NCM pass: a plain numpy process, nothing else imported.

``python -m imgscale.bench.class_sums_peer FEATURES_DIR LABELS.npy ROWS_PER_CHUNK DIM CLASSES``
reads each row chunk file of a store's features array (``c/<i>/0``, float32 rows followed by a
crc32c, not checked here) with ``np.fromfile``, adds the rows of each class by one matrix product
with the chunk's one-hot label matrix (unlabelled rows, label -1, have no column), accumulates
chunks in float64, and prints the sums' total, which the caller checks against the model's.

The product is how a numpy user computes class sums fast: it runs on the BLAS's threads, where
sorting the rows by label and summing runs (``np.add.reduceat``, this peer until it was found
slower) copies every row twice on one core.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


def class_sums(
    features: Path, labels: np.ndarray, rows_per_chunk: int, dim: int, classes: int
) -> np.ndarray:
    sums = np.zeros((classes, dim))
    for start in range(0, len(labels), rows_per_chunk):
        y = labels[start : start + rows_per_chunk]
        file = features / "c" / str(start // rows_per_chunk) / "0"
        X = np.fromfile(file, np.float32, count=len(y) * dim).reshape(len(y), dim)
        labelled = np.flatnonzero(y >= 0)
        one_hot = np.zeros((classes, len(y)), np.float32)
        one_hot[y[labelled], labelled] = 1
        sums += one_hot @ X  # float32 within a chunk, float64 across chunks
    return sums


def main(argv: list[str]) -> None:
    features, labels_file, rows_per_chunk, dim, classes = argv
    labels = np.load(labels_file)
    sums = class_sums(Path(features), labels, int(rows_per_chunk), int(dim), int(classes))
    print(f"{sums.sum():.17g}")


if __name__ == "__main__":
    main(sys.argv[1:])
