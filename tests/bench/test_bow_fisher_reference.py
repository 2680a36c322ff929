"""The reference pipeline of `imgscale bench cifar10-bow-fisher` against formulas written out
by hand, and against imgscale's own steps where both compute the same thing independently."""

import io

import numpy as np
import pytest
from PIL import Image
from scipy import sparse
from sklearn.mixture import GaussianMixture

from imgscale.pipeline.describe import BagOfWords, DenseSift, LocalColor
from imgscale.pipeline.describe.dense_sift import grid_keypoints, patch_grid
from imgscale.pipeline.describe.fisher_vector import fisher_vectors
from imgscale_reproductions import bow_fisher_reference as ref


def jpeg(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(array).save(out, format="PNG")
    return out.getvalue()


def test_decode_resizes_the_shorter_side_and_crops_the_centre():
    image = np.zeros((20, 40), np.uint8)
    image[:, 6:34] = 200  # bright over the centre square, dark at the far sides
    out = ref.decode([jpeg(image)], 10)
    assert out.shape == (1, 10, 10)
    assert out.min() == 200  # scaled 2:1 and cropped to the middle 20 columns


def test_grid_centres_are_imgscales_patch_centres():
    grid = ref.Grid(patch=16, step=8)
    expected = grid_keypoints(patch_grid(64, 64, (16,), 8))[:, :2]
    np.testing.assert_array_equal(grid.centres(64), expected)


def test_dense_sift_at_imgscales_keypoint_size_is_imgscales_descriptor():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (2, 48, 48), dtype=np.uint8)
    ours = DenseSift((16,), 8, root=True).fit().transform(images)
    theirs = ref.dense_sift(images, ref.Grid(16, 8, 16 / 6), root=True)
    np.testing.assert_allclose(theirs, ours, atol=1e-6)


def test_intersection_kernel_is_the_sum_of_minima():
    rng = np.random.default_rng(1)
    A, B = rng.random((70, 5)), rng.random((3, 5))
    expected = [[sum(min(a[d], b[d]) for d in range(5)) for b in B] for a in A]
    np.testing.assert_allclose(ref.intersection_kernel(A, B), expected)


def test_intersection_kernel_of_sparse_rows_is_the_sum_of_minima():
    # Histogram-like rows, most bins empty, some columns empty on one side only.
    rng = np.random.default_rng(2)
    A = rng.random((40, 30)) * (rng.random((40, 30)) < 0.2)
    B = rng.random((25, 30)) * (rng.random((25, 30)) < 0.2)
    A[:, 3], B[:, 4] = 0, 0
    expected = [[sum(min(a[d], b[d]) for d in range(30)) for b in B] for a in A]
    np.testing.assert_allclose(ref.intersection_kernel(A, B), expected)
    np.testing.assert_allclose(ref.intersection_kernel(sparse.csr_matrix(A), B), expected)


def test_bow_histograms_weigh_the_pyramid_levels_as_lazebnik_eq3():
    # A 4×4 image with four 2-px patches, one a quadrant: words 0, 1, 1, 0 (row-major).
    words = np.eye(2, dtype=np.float32)
    descriptors = words[[0, 1, 1, 0]][None]
    grid = ref.Grid(patch=2, step=2)
    out = ref.bow_histograms(descriptors, words, grid, side=4, levels=2)
    # Level 0 weighs 1/2, level 1 (four cells of one patch each) 1/2; then the row sums to 1.
    level0 = np.array([2, 2]) / 2
    level1 = np.array([[1, 0], [0, 1], [0, 1], [1, 0]]).ravel() / 2
    expected = np.concatenate([level0, level1])
    np.testing.assert_allclose(out[0], expected / expected.sum())


def test_fisher_vectors_are_imgscales_for_the_same_mixture():
    rng = np.random.default_rng(2)
    descriptors = rng.normal(0, 1, (3, 30, 6))
    gmm = GaussianMixture(3, covariance_type="diag", random_state=0).fit(descriptors.reshape(-1, 6))
    identity = type("Identity", (), {"transform": staticmethod(lambda x: x)})()
    theirs = ref.fisher_vectors(descriptors, ref.FisherModel(identity, gmm))
    ours = fisher_vectors(descriptors, gmm.weights_, gmm.means_, gmm.covariances_)
    np.testing.assert_allclose(theirs, ours, atol=1e-5)


def test_validation_chooses_the_regularisation():
    rng = np.random.default_rng(3)
    centres = rng.normal(0, 1, (3, 8))
    y = np.repeat(np.arange(3), 40)
    X = np.abs(centres[y] + rng.normal(0, 0.5, (120, 8)))
    predicted = ref.intersection_svc(X[::2], y[::2], X[1::2], X[1::2], y[1::2])
    assert ref.per_class_rate(y[1::2], predicted) > 0.9
    predicted = ref.linear_ridge(X[::2], y[::2], X[1::2])
    assert ref.per_class_rate(y[1::2], predicted) > 0.9


@pytest.mark.parametrize("levels", [1, 3])
def test_bow_histograms_sum_to_one(levels):
    rng = np.random.default_rng(4)
    descriptors = rng.random((2, 49, 8)).astype(np.float32)
    words = rng.random((5, 8)).astype(np.float32)
    out = ref.bow_histograms(descriptors, words, ref.Grid(16, 8), side=64, levels=levels)
    assert out.shape == (2, 5 * sum(4**level for level in range(levels)))
    np.testing.assert_allclose(out.sum(axis=1), 1)


def test_local_color_is_imgscales_local_colour_statistics():
    rng = np.random.default_rng(5)
    images = rng.integers(0, 256, (2, 40, 40, 3), dtype=np.uint8)
    ours = LocalColor((16,), 8).fit().transform(images)
    theirs = ref.local_color(images, ref.Grid(16, 8))
    np.testing.assert_allclose(theirs, ours, atol=1e-5)


def test_imgscales_pyramid_histograms_are_the_references_for_the_same_words():
    rng = np.random.default_rng(5)
    images = rng.integers(0, 256, (3, 64, 64), dtype=np.uint8)
    bow = BagOfWords(n_words=8, pyramid_levels=3, image_size=64).fit(images)
    sift = ref.dense_sift(images, ref.Grid(16, 8, 16 / 6))
    # OpenCV's descriptor is imgscale's × 512 (its integer scale): the words scale with it.
    theirs = ref.bow_histograms(sift, bow.words_ * 512, ref.Grid(16, 8), side=64, levels=3)
    np.testing.assert_allclose(bow.transform(images), theirs, atol=1e-6)


def test_scores_put_the_pyramid_beside_the_flat_histograms_of_the_same_words(tmp_path):
    import pyarrow.parquet as pq

    from imgscale_reproductions.cifar10_gist import digits_table

    table = digits_table()
    splits = {"train": tmp_path / "train.parquet", "test": tmp_path / "test.parquet"}
    pq.write_table(table.slice(0, 200), splits["train"])
    pq.write_table(table.slice(200, 100), splits["test"])
    settings = ref.Settings(64, ref.Grid(16, 8, 4.0), 20, 2, 8, 100, pyramid_levels=3)
    rates = ref.scores(splits, settings, fisher=False)
    assert set(rates) == {"bow svc", "bow linear", "bow pyramid svc", "bow pyramid linear"}
    # Digits differ by where their strokes are: the 4×4 cells see what one histogram cannot.
    assert rates["bow pyramid svc"] > rates["bow svc"] + 0.05, rates
    flat = ref.scores(splits, ref.Settings(64, ref.Grid(16, 8, 4.0), 20, 2, 8, 100), fisher=False)
    assert flat == {key: rates[key] for key in ("bow svc", "bow linear")}
