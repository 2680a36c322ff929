"""The reference that ``imgscale bench cifar10-bow-fisher`` and ``photos-bow-fisher`` hold
imgscale's bags of words and Fisher vectors to: the straightforward pipeline a reader would
write in an afternoon, with Pillow, OpenCV, faiss and scikit-learn and nothing of imgscale's.

- **images**: each JPEG decoded by Pillow, converted to grey (RGB for colour), resized so its
  shorter side is ``size`` and centre-cropped to a square (bilinear).
- **dense SIFT**: ``cv2.SIFT.compute`` at keypoints every ``step`` pixels whose patches of
  ``patch`` pixels lie inside the image, of OpenCV keypoint size ``keypoint_size``; RootSIFT
  (L1-normalise, square root) where asked.
- **bags of words**: a faiss k-means dictionary (``niter`` iterations) of a sample of the train
  images' descriptors; each image's L1-normalised histogram of nearest words (with a spatial
  pyramid: each cell's histogram, weighted as Lazebnik et al. 2006 eq. 3); scikit-learn ``SVC``
  on the precomputed intersection kernel, and linear ``RidgeClassifierCV`` on the histograms.
- **Fisher vectors**: scikit-learn ``PCA`` of RootSIFT (and of local colour statistics: the
  mean and standard deviation of R, G, B in each of 4×4 cells of a patch, paper 002 §5.1) to
  64-D and a diagonal ``GaussianMixture`` (k-means start, EM to scikit-learn's tolerance),
  improved Fisher vectors (gradients w.r.t. means and standard deviations, Sánchez et al. 2013
  eqs. 16–17, power and L2 normalised), one a channel, concatenated; ``RidgeClassifier`` and
  ``LinearSVC``.

Regularisation (C, α) is chosen on the validation images where there are some, else by
scikit-learn's leave-one-out (ridge), C = 10 (SVC) and C = 1 (LinearSVC). Scores are per-class
rates (the mean of the per-class recalls), as ``imgscale evaluate`` reports.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# A grid a reader would search; the validation images choose.
ALPHAS = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)
SVC_CS = (0.1, 1.0, 10.0, 100.0)


def decode(blobs: Sequence[bytes], size: int, mode: str = "L") -> np.ndarray:
    """Images (n, size, size[, 3]) uint8: each decoded, its shorter side resized to ``size``
    (bilinear) and centre-cropped."""
    from PIL import Image, ImageOps

    out = []
    for blob in blobs:
        image = ImageOps.exif_transpose(Image.open(io.BytesIO(blob))).convert(mode)
        scale = size / min(image.size)
        width, height = (max(size, round(side * scale)) for side in image.size)
        image = image.resize((width, height), Image.Resampling.BILINEAR)
        left, top = (width - size) // 2, (height - size) // 2
        out.append(np.asarray(image.crop((left, top, left + size, top + size))))
    return np.stack(out)


@dataclass(frozen=True)
class Grid:
    """Patches of ``patch`` pixels every ``step`` pixels, described at OpenCV keypoint size
    ``keypoint_size``."""

    patch: int = 16
    step: int = 8
    keypoint_size: float = 16 / 6

    def centres(self, side: int) -> np.ndarray:
        """(x, y) of every patch centre of a side × side image, row-major."""
        starts = np.arange(0, side - self.patch + 1, self.step) + (self.patch - 1) / 2
        y, x = np.meshgrid(starts, starts, indexing="ij")
        return np.column_stack([x.ravel(), y.ravel()])


def dense_sift(images: np.ndarray, grid: Grid, root: bool = False) -> np.ndarray:
    """SIFT of every patch of ``grid`` in grey images (n, s, s): float32 (n, patches, 128),
    RootSIFT when ``root``, else OpenCV's descriptor as it comes (0–255 scale)."""
    import cv2

    keypoints = [
        cv2.KeyPoint(float(x), float(y), float(grid.keypoint_size), 0)
        for x, y in grid.centres(images.shape[1])
    ]
    sift = cv2.SIFT_create()
    out = np.stack([sift.compute(image, keypoints)[1] for image in images]).astype(np.float32)
    if root:
        out /= np.maximum(out.sum(axis=2, keepdims=True), 1e-12)
        np.sqrt(out, out=out)
    return out


def local_color(images: np.ndarray, grid: Grid, cells: int = 4) -> np.ndarray:
    """Mean and standard deviation of R, G, B (in [0, 1]) in each of cells × cells cells of every
    patch of ``grid`` in RGB images (n, s, s, 3): float32 (n, patches, 6 · cells²). The patch
    side must be a multiple of ``cells``."""
    side, width = images.shape[1], grid.patch // cells
    starts = np.arange(0, side - grid.patch + 1, grid.step)
    pixels = images.astype(np.float64) / 255
    out = []
    for top in starts:
        for left in starts:
            patch = pixels[:, top : top + grid.patch, left : left + grid.patch]
            blocks = patch.reshape(len(images), cells, width, cells, width, 3)
            out.append(np.concatenate([
                blocks.mean(axis=(2, 4)).reshape(len(images), -1),
                blocks.std(axis=(2, 4)).reshape(len(images), -1),
            ], axis=1))  # fmt: skip
    return np.stack(out, axis=1).astype(np.float32)


def per_class_rate(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Mean over classes of the share of each class's images predicted right."""
    from sklearn.metrics import balanced_accuracy_score

    return float(balanced_accuracy_score(y_true, y_pred))


def sample_descriptors(descriptors: np.ndarray, images: int, seed: int) -> np.ndarray:
    """Every descriptor of ``images`` train images drawn at random: (m, d)."""
    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(descriptors), min(images, len(descriptors)), replace=False)
    return descriptors[np.sort(chosen)].reshape(-1, descriptors.shape[2])


def kmeans_words(descriptors: np.ndarray, words: int, niter: int, seed: int) -> np.ndarray:
    """faiss k-means centres (words, d) of the descriptors (m, d)."""
    import faiss

    kmeans = faiss.Kmeans(descriptors.shape[1], words, niter=niter, seed=seed, verbose=False)
    kmeans.train(np.ascontiguousarray(descriptors, np.float32))
    return kmeans.centroids


def bow_histograms(
    descriptors: np.ndarray, words: np.ndarray, grid: Grid, side: int, levels: int = 1
) -> np.ndarray:
    """Each image's histogram of nearest words (n, words · Σ 4^l), L1-normalised; with
    ``levels`` > 1 a spatial pyramid of 1×1, 2×2, ... cells weighted as Lazebnik et al. eq. 3."""
    import faiss

    n, patches, d = descriptors.shape
    index = faiss.IndexFlatL2(d)
    index.add(np.ascontiguousarray(words, np.float32))
    _, nearest = index.search(np.ascontiguousarray(descriptors.reshape(-1, d)), 1)
    nearest = nearest.reshape(n, patches)
    K = len(words)
    centres = grid.centres(side)
    top = levels - 1
    # Filled level by level in place: the small run's 10,000 × 8,400 pyramid is 0.7 GB.
    out = np.zeros((n, K * sum(4**level for level in range(levels))))
    start = 0
    for level in range(levels):
        cells = 2**level
        x, y = (np.minimum((centres[:, a] + 0.5) * cells // side, cells - 1) for a in (0, 1))
        cell = (y * cells + x).astype(np.int64)
        weight = 1 / 2**top if level == 0 else 1 / 2 ** (top - level + 1)
        for i in range(n):
            np.add.at(out[i], start + cell * K + nearest[i], weight)
        start += cells * cells * K
    out /= out.sum(axis=1, keepdims=True)
    return out


def intersection_kernel(A, B) -> np.ndarray:
    """K[i, j] = Σ_d min(A[i, d], B[j, d]) of non-negative rows A (n, D) and B (m, D), dense or
    scipy sparse.

    Only dimensions non-zero on both sides add to a minimum, so each column d adds the outer
    minimum of A's and B's non-zero values in it: Σ_d nnz_A(d) · nnz_B(d) minima in all. A bag
    of words of P patches has at most P non-zero bins a level, so on the pyramid of 400-word
    histograms of 49 patches this is far fewer minima than the n · m · D of the dense sum.
    """
    from scipy import sparse

    A, B = sparse.csc_matrix(A, dtype=np.float64), sparse.csc_matrix(B, dtype=np.float64)
    out = np.zeros((A.shape[0], B.shape[0]))
    for d in range(A.shape[1]):
        a, b = slice(A.indptr[d], A.indptr[d + 1]), slice(B.indptr[d], B.indptr[d + 1])
        if a.start < a.stop and b.start < b.stop:
            rows, cols = A.indices[a], B.indices[b]
            out[np.ix_(rows, cols)] += np.minimum.outer(A.data[a], B.data[b])
    return out


def _choose(fit_score, grid, validation: bool):
    """The fitted model of the grid value scoring best on validation (the first alone without)."""
    best = None
    for value in grid if validation else grid[:1]:
        model, score = fit_score(value)
        if best is None or score > best[1]:
            best = (model, score)
    return best[0]


def intersection_svc(train, y, test, val=None, y_val=None) -> np.ndarray:
    """Predictions of scikit-learn's SVC on the exact intersection kernel (C by validation)."""
    from sklearn.svm import SVC

    gram = intersection_kernel(train, train)
    val_gram = intersection_kernel(val, train) if val is not None else None

    def fit_score(C):
        model = SVC(C=C, kernel="precomputed").fit(gram, y)
        score = per_class_rate(y_val, model.predict(val_gram)) if val is not None else 0.0
        return model, score

    grid = SVC_CS if val is not None else (10.0,)
    return _choose(fit_score, grid, val is not None).predict(intersection_kernel(test, train))


def linear_ridge(train, y, test, val=None, y_val=None) -> np.ndarray:
    """Predictions of ``RidgeClassifier`` (α by validation, else leave-one-out)."""
    from sklearn.linear_model import RidgeClassifier, RidgeClassifierCV

    if val is None:
        return RidgeClassifierCV(alphas=ALPHAS).fit(train, y).predict(test)

    def fit_score(alpha):
        model = RidgeClassifier(alpha=alpha).fit(train, y)
        return model, per_class_rate(y_val, model.predict(val))

    return _choose(fit_score, ALPHAS, True).predict(test)


def linear_svc(train, y, test, val=None, y_val=None) -> np.ndarray:
    """Predictions of scikit-learn's LinearSVC (C by validation, else 1)."""
    from sklearn.svm import LinearSVC

    def fit_score(C):
        model = LinearSVC(C=C).fit(train, y)
        score = per_class_rate(y_val, model.predict(val)) if val is not None else 0.0
        return model, score

    grid = SVC_CS if val is not None else (1.0,)
    return _choose(fit_score, grid, val is not None).predict(test)


@dataclass
class FisherModel:
    pca: object
    gmm: object


def fit_fisher(descriptors: np.ndarray, gaussians: int, components: int, seed: int) -> FisherModel:
    """PCA to ``components`` and a diagonal GMM of ``gaussians`` (k-means start, EM to
    scikit-learn's tolerance, at most 100 iterations) of descriptors (m, d)."""
    from sklearn.decomposition import PCA
    from sklearn.mixture import GaussianMixture

    pca = PCA(components, random_state=seed).fit(descriptors)
    gmm = GaussianMixture(
        gaussians, covariance_type="diag", max_iter=100, reg_covar=1e-6, random_state=seed
    ).fit(pca.transform(descriptors))
    return FisherModel(pca, gmm)


def fisher_vectors(descriptors: np.ndarray, model: FisherModel) -> np.ndarray:
    """Improved Fisher vectors (n, 2 · gaussians · components) of each image's descriptors."""
    gmm = model.gmm
    w, mu, var = gmm.weights_, gmm.means_, gmm.covariances_
    sigma = np.sqrt(var)
    out = []
    for image in descriptors:
        x = model.pca.transform(image)
        gamma = gmm.predict_proba(x)
        T = len(x)
        diff = (x[:, None, :] - mu[None]) / sigma[None]
        g_mu = (gamma[:, :, None] * diff).sum(axis=0) / (T * np.sqrt(w)[:, None])
        g_sigma = (gamma[:, :, None] * (diff**2 - 1)).sum(axis=0) / (T * np.sqrt(2 * w)[:, None])
        v = np.concatenate([g_mu.ravel(), g_sigma.ravel()])
        v = np.sign(v) * np.sqrt(np.abs(v))
        out.append(v / max(np.linalg.norm(v), 1e-12))
    return np.asarray(out, np.float32)


@dataclass(frozen=True)
class Settings:
    """The settings imgscale's arms run at, for the reference to run at the same."""

    image_size: int
    grid: Grid
    words: int
    gaussians: int
    components: int
    sample: int
    seed: int = 0
    pyramid_levels: int = 1


def read_split(path) -> tuple[list[bytes], np.ndarray]:
    """The image bytes and labels (strings) of a split's parquet file (id, label, image)."""
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=["label", "image"])
    return table.column("image").to_pylist(), np.asarray(table.column("label").to_pylist())


def scores(
    splits: dict,
    settings: Settings,
    fisher: bool = True,
    bow: bool = True,
    linear_svc_on_fisher: bool = True,
) -> dict[str, float]:
    """Per-class rates on the test split of the reference's bags of words, with ``bow``
    (``bow svc``: the exact intersection-kernel SVC, ``bow linear``: ridge on the histograms;
    ``bow pyramid svc`` and ``bow pyramid linear`` the same on the spatial pyramid of the same
    words when ``settings.pyramid_levels`` > 1) and, with ``fisher``, Fisher vectors of RootSIFT
    and colour (``fv ridge``, and ``fv linear svc`` with ``linear_svc_on_fisher``: liblinear
    copies its rows at 16 bytes a value, 2.6 GB for 10,000 FV-64 rows), learned on the train
    split, the validation split (when ``splits`` has one) choosing C and α."""
    data = {name: read_split(path) for name, path in splits.items()}
    labels = {name: y for name, (_, y) in data.items()}
    size, grid = settings.image_size, settings.grid
    grey = {name: decode(blobs, size, "L") for name, (blobs, _) in data.items()}
    val = "val" in data
    out = {}

    def classify(features: dict[str, np.ndarray], classifier) -> float:
        extra = (features["val"], labels["val"]) if val else ()
        predicted = classifier(features["train"], labels["train"], features["test"], *extra)
        return per_class_rate(labels["test"], predicted)

    if bow:
        sift = {name: dense_sift(images, grid) for name, images in grey.items()}
        sample = sample_descriptors(sift["train"], settings.sample, settings.seed)
        words = kmeans_words(sample, settings.words, 25, settings.seed)
        levels = settings.pyramid_levels
        flat = {name: bow_histograms(x, words, grid, size) for name, x in sift.items()}
        pyramid = {}
        if levels > 1:
            pyramid = {name: bow_histograms(x, words, grid, size, levels)
                       for name, x in sift.items()}  # fmt: skip
        del sift
        out["bow svc"] = classify(flat, intersection_svc)
        out["bow linear"] = classify(flat, linear_ridge)
        if pyramid:
            out["bow pyramid svc"] = classify(pyramid, intersection_svc)
            out["bow pyramid linear"] = classify(pyramid, linear_ridge)
        del flat, pyramid
    if not fisher:
        return out

    channels = {
        "sift": lambda: {
            name: dense_sift(images, grid, root=True) for name, images in grey.items()
        },
        "color": lambda: {
            name: local_color(decode(blobs, size, "RGB"), grid) for name, (blobs, _) in data.items()
        },
    }
    vectors = {name: [] for name in data}
    for describe in channels.values():  # one channel's descriptors held at a time
        local = describe()
        sample = sample_descriptors(local["train"], settings.sample, settings.seed)
        model = fit_fisher(sample, settings.gaussians, settings.components, settings.seed)
        for name, x in local.items():
            vectors[name].append(fisher_vectors(x, model))
        del local
    fv = {name: np.hstack(parts) for name, parts in vectors.items()}
    del vectors
    out["fv ridge"] = classify(fv, linear_ridge)
    if linear_svc_on_fisher:
        out["fv linear svc"] = classify(fv, linear_svc)
    return out
