"""Vocabulary fits by passes over chunks: each kernel against numpy, the fits against
scikit-learn, and chunked fits equal to one-chunk fits."""

import itertools

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.mixture import GaussianMixture as SkGaussianMixture

from imgscale.pipeline.describe import FisherVector, InMemoryChunks, watch_passes
from imgscale.pipeline.describe.vocabulary import (
    chunk_gmm_stats,
    chunk_kmeans_stats,
    fit_gmm,
    fit_kmeans,
    fit_pca,
)


def blobs(n: int, d: int, seed: int) -> np.ndarray:
    """Four elongated Gaussian clusters, float32."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 6, (4, d))
    scales = rng.uniform(0.5, 2.0, (4, d))
    labels = rng.integers(0, 4, n)
    return (centres[labels] + rng.normal(size=(n, d)) * scales[labels]).astype(np.float32)


def chunked(X: np.ndarray, parts: int) -> InMemoryChunks:
    return InMemoryChunks([{"x": part} for part in np.array_split(X, parts)])


def test_kmeans_statistics_are_those_of_the_nearest_centre():
    X = blobs(500, 5, 0)
    centres = X[:7].astype(np.float64)
    counts, sums, squares = chunk_kmeans_stats({"x": X}, "x", None, centres)
    nearest = np.argmin(((X[:, None, :] - centres[None]) ** 2).sum(axis=2), axis=1)
    for k in range(7):
        members = X[nearest == k].astype(np.float64)
        assert counts[k] == len(members)
        np.testing.assert_allclose(sums[k], members.sum(axis=0), rtol=1e-10)
        np.testing.assert_allclose(squares[k], (members**2).sum(axis=0), rtol=1e-10)


def test_gmm_statistics_match_the_posteriors_written_out():
    X = blobs(300, 3, 1).astype(np.float64)
    rng = np.random.default_rng(2)
    weights = np.array([0.2, 0.5, 0.3])
    means, variances = rng.normal(0, 4, (3, 3)), rng.uniform(1, 5, (3, 3))
    density = np.stack(
        [
            w * np.exp(-0.5 * ((X - m) ** 2 / v).sum(axis=1)) / np.sqrt((2 * np.pi) ** 3 * v.prod())
            for w, m, v in zip(weights, means, variances, strict=True)
        ],
        axis=1,
    )
    gamma = density / density.sum(axis=1, keepdims=True)
    s0, s1, s2, likelihood = chunk_gmm_stats({"x": X}, "x", None, weights, means, variances)
    # A pass computes in float32 within a chunk: float32's precision, not float64's.
    np.testing.assert_allclose(s0, gamma.sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(s1, gamma.T @ X, rtol=1e-5)
    np.testing.assert_allclose(s2, gamma.T @ X**2, rtol=1e-5)
    assert likelihood == pytest.approx(np.log(density.sum(axis=1)).sum(), rel=1e-6)


def test_pca_is_numpys_eigendecomposition_of_the_covariance():
    X = blobs(400, 6, 3)
    mean, components = fit_pca(chunked(X, 3), "x", 2)
    np.testing.assert_allclose(mean, X.mean(axis=0), rtol=1e-6)
    _, _, vt = np.linalg.svd(X - X.mean(axis=0), full_matrices=False)
    np.testing.assert_allclose(np.abs(components @ vt[:2].T), np.eye(2), atol=1e-6)


def test_kmeans_over_chunks_equals_kmeans_over_one_chunk_and_finds_the_blobs():
    X = blobs(2000, 4, 4)
    args = dict(n_descriptors=len(X), max_iter=100, tol=1e-6, random_state=0)
    one = fit_kmeans(chunked(X, 1), "x", None, 4, **args)
    many = fit_kmeans(chunked(X, 5), "x", None, 4, **args)
    # The seeding sample differs with the chunking; the optimum does not.
    order = lambda r: r.centres[np.lexsort(r.centres.T)]  # noqa: E731
    np.testing.assert_allclose(order(one), order(many), rtol=1e-6, atol=1e-6)
    assert one.counts.sum() == len(X)


def test_kmeans_stops_at_the_first_pass_whose_summed_centre_moves_are_within_tol():
    X = blobs(100, 3, 7)
    args = dict(n_descriptors=len(X), tol=0, random_state=0)
    # 20 rows a centre for 6 centres is more than 100 rows: the seeding sample is every row, so
    # the variance the criterion divides by is that of X. A fit stopped after i passes holds the
    # centres of pass i.
    passes = [fit_kmeans(chunked(X, 3), "x", None, 6, max_iter=i, **args).centres
              for i in range(1, 9)]  # fmt: skip
    summed = [((b - a) ** 2).sum() / X.var(axis=0, dtype=np.float64).mean()
              for a, b in itertools.pairwise(passes)]  # fmt: skip
    # The first pass whose moves are below every earlier pass's: stopping there is the rule's
    # doing (summed[i] is the move into pass i + 2).
    first = next(i for i in range(1, len(summed)) if summed[i] < min(summed[:i]) and summed[i] > 0)
    tol = summed[first]
    seen = []
    with watch_passes(seen.append):
        stopped = fit_kmeans(chunked(X, 3), "x", None, 6, n_descriptors=len(X), max_iter=50,
                             tol=tol, random_state=0)  # fmt: skip
    assert stopped.n_iter == first + 2
    np.testing.assert_allclose([p.figure for p in seen][1:], summed[: first + 1], rtol=1e-9)
    np.testing.assert_array_equal(stopped.centres, passes[first + 1])


def test_kmeans_reaches_scikit_learns_inertia():
    # Eight elongated clusters, two of them touching: Lloyd's local optima differ by seeding.
    rng = np.random.default_rng(3)
    centres = rng.normal(0, 5, (8, 4))
    centres[1] = centres[0] + 1.5
    labels = rng.integers(0, 8, 4000)
    X = centres[labels] + rng.normal(size=(4000, 4)) * rng.uniform(0.5, 1.5, (8, 4))[labels]
    X = X.astype(np.float32)

    def inertia(result_centres):
        return ((X[:, None, :] - result_centres[None]) ** 2).sum(axis=2).min(axis=1).sum()

    ours = [
        inertia(fit_kmeans(chunked(X, 4), "x", None, 8, n_descriptors=len(X), max_iter=300,
                           tol=1e-4, random_state=seed).centres)
        for seed in range(5)
    ]  # fmt: skip
    theirs = [
        inertia(KMeans(8, n_init=1, tol=1e-4, random_state=seed).fit(X).cluster_centers_)
        for seed in range(5)
    ]
    # At the same tol both end where the summed moves are below 1e-4 of the variance, so a
    # centre is within 1e-2 standard deviations of its fixed point and the inertia within 1e-4
    # of that of the optimum it converged to; seeded alike (k-means++), the best of five seeds
    # finds the same optimum as scikit-learn's best, and the median is as good as its median.
    assert min(ours) == pytest.approx(min(theirs), rel=1e-4)
    assert np.median(ours) <= np.median(theirs) * (1 + 1e-4)


def test_em_reaches_scikit_learns_likelihood_from_the_same_start():
    X = blobs(3000, 3, 5)
    start = fit_kmeans(
        chunked(X, 4), "x", None, 4, n_descriptors=len(X), max_iter=100, tol=1e-6, random_state=0
    )
    ours = fit_gmm(chunked(X, 4), "x", None, start, max_iter=500, tol=1e-9)
    reference = SkGaussianMixture(
        4, covariance_type="diag", means_init=start.centres, tol=1e-9, max_iter=500, reg_covar=0
    ).fit(X.astype(np.float64))
    # Within float32 rounding of the likelihood (relative 1e-6); the likelihood is flat at its
    # optimum, so that much difference moves the means by a few 1e-4 (scale about 8).
    assert ours.log_likelihood == pytest.approx(reference.score(X.astype(np.float64)), rel=1e-6)
    order = np.argsort(ours.means[:, 0])
    np.testing.assert_allclose(
        ours.means[order], reference.means_[np.argsort(reference.means_[:, 0])], atol=5e-4
    )


def test_em_stops_where_scikit_learn_stops_from_the_same_start_at_its_tolerance():
    """Six overlapping clusters that EM takes several passes on. From the same start (k-means'
    clusters' weights, means and variances) and at scikit-learn's own tolerance on the same
    measure, the mean log-likelihood a descriptor, EM stops one pass before scikit-learn's
    count: scikit-learn counts the pass that measured the last gain and moves once more."""
    rng = np.random.default_rng(1)
    centres = rng.normal(0, 1.5, (6, 3))
    labels = rng.integers(0, 6, 4000)
    scales = rng.uniform(0.5, 1.5, (6, 3))
    X = (centres[labels] + rng.normal(size=(4000, 3)) * scales[labels]).astype(np.float32)
    start = fit_kmeans(
        chunked(X, 4), "x", None, 6, n_descriptors=len(X), max_iter=100, tol=1e-6, random_state=0
    )
    means = start.sums / start.counts[:, None]
    variances = start.squares / start.counts[:, None] - means**2
    reference = SkGaussianMixture(
        6,
        covariance_type="diag",
        weights_init=start.counts / start.counts.sum(),
        means_init=means,
        precisions_init=1 / variances,
        reg_covar=0,
        max_iter=500,
    ).fit(X.astype(np.float64))
    assert reference.converged_ and reference.n_iter_ >= 8
    ours = fit_gmm(chunked(X, 4), "x", None, start, max_iter=500, tol=FisherVector().tol)
    assert ours.n_iter == reference.n_iter_ - 1
    assert ours.log_likelihood == pytest.approx(reference.score(X.astype(np.float64)), abs=1e-2)


def test_em_fits_dimensions_of_very_different_spread_as_scikit_learn_does():
    """After PCA the last axes' variance can be far below the mean one's: each dimension's
    variances are floored by its own spread, so EM reaches scikit-learn's likelihood (whose
    floor is a tiny constant) from the same start; a floor from the mean spread held every
    Gaussian wider than the data along the narrow axis."""
    X = blobs(3000, 3, 5) * np.array([1.0, 1.0, 1e-3], dtype=np.float32)
    start = fit_kmeans(
        chunked(X, 4), "x", None, 4, n_descriptors=len(X), max_iter=100, tol=1e-6, random_state=0
    )
    means = start.sums / start.counts[:, None]
    reference = SkGaussianMixture(
        4,
        covariance_type="diag",
        weights_init=start.counts / start.counts.sum(),
        means_init=means,
        precisions_init=1 / (start.squares / start.counts[:, None] - means**2),
        reg_covar=0,
        tol=1e-9,
        max_iter=500,
    ).fit(X.astype(np.float64))
    ours = fit_gmm(chunked(X, 4), "x", None, start, max_iter=500, tol=1e-9)
    expected = reference.score(X.astype(np.float64))
    assert ours.log_likelihood == pytest.approx(expected, abs=1e-3)


def test_fisher_vectors_em_tolerance_is_scikit_learns():
    assert FisherVector().tol == SkGaussianMixture().tol


def test_each_em_pass_does_not_lower_the_likelihood():
    X = blobs(1000, 3, 6)
    start = fit_kmeans(
        chunked(X, 2), "x", None, 6, n_descriptors=len(X), max_iter=3, tol=0, random_state=0
    )
    likelihoods = [
        fit_gmm(chunked(X, 2), "x", None, start, max_iter=n, tol=-np.inf).log_likelihood
        for n in range(0, 8)
    ]
    assert all(b >= a - 1e-9 for a, b in itertools.pairwise(likelihoods))
    assert likelihoods[-1] > likelihoods[0]


def test_fewer_descriptors_than_centres_are_refused():
    with pytest.raises(ValueError, match="3 local descriptors for 5 centres"):
        fit_kmeans(
            chunked(blobs(3, 2, 0), 1), "x", None, 5,
            n_descriptors=3, max_iter=5, tol=0, random_state=0,
        )  # fmt: skip


def test_a_watcher_sees_every_pass_with_the_likelihood_each_em_pass_measured():
    X = blobs(1000, 3, 6)
    chunks, seen = chunked(X, 2), []
    with watch_passes(seen.append):
        projection = fit_pca(chunks, "x", 2)
        start = fit_kmeans(chunks, "x", projection, 6, n_descriptors=len(X), max_iter=50,
                           tol=1e-4, random_state=0)  # fmt: skip
        fit_gmm(chunks, "x", projection, start, max_iter=5, tol=-np.inf)
    assert [p.stage for p in seen] == ["PCA"] + ["k-means"] * start.n_iter + ["EM"] * 5
    assert {p.channel for p in seen} == {"x"}
    kmeans = [p for p in seen if p.stage == "k-means"]
    assert [p.iteration for p in kmeans] == list(range(1, start.n_iter + 1))
    assert start.n_iter < 50 and kmeans[-1].figure <= 1e-4 < kmeans[0].figure  # it converged
    em = [p for p in seen if p.stage == "EM"]
    assert [(p.iteration, p.max_iter) for p in em] == [(i, 5) for i in range(1, 6)]
    # Pass i measures the mixture after i - 1 M-steps: the likelihood a fit stopped there has.
    stopped = [
        fit_gmm(chunks, "x", projection, start, max_iter=n, tol=-np.inf).log_likelihood
        for n in range(5)
    ]
    np.testing.assert_allclose([p.figure for p in em], stopped, rtol=1e-12)
    assert len(seen) == 1 + start.n_iter + 5  # fits outside the context report to nobody
