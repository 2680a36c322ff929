"""The peer of ``imgscale bench overhead``'s NCM pass: a plain numpy process, nothing else imported.

``python -m imgscale.bench.class_sums_peer FEATURES_DIR LABELS.npy ROWS_PER_CHUNK DIM CLASSES``
reads each row chunk file of a store's features array (``c/<i>/0``, float32 rows followed by a
crc32c, not checked here) with ``np.fromfile``, adds the rows of each class by sorting them by
label and summing runs (``np.add.reduceat``; unlabelled rows, label -1, left out), accumulates
chunks in float64, and prints the sums' total, which the caller checks against the model's.
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
        order = np.argsort(y, kind="stable")
        order = order[np.searchsorted(y[order], 0) :]  # unlabelled rows (-1) are no class's
        present, first = np.unique(y[order], return_index=True)
        # float32 within a chunk (a few hundred rows a class), float64 across chunks.
        sums[present] += np.add.reduceat(X[order], first, axis=0)
    return sums


def main(argv: list[str]) -> None:
    features, labels_file, rows_per_chunk, dim, classes = argv
    labels = np.load(labels_file)
    sums = class_sums(Path(features), labels, int(rows_per_chunk), int(dim), int(classes))
    print(f"{sums.sum():.17g}")


if __name__ == "__main__":
    main(sys.argv[1:])
