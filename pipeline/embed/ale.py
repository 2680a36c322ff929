"""ALE: Approximate Laplacian Eigenmaps for incremental batch embedding (paper 001 §2, §3)."""

from __future__ import annotations

from imgscale.pipeline.embed.pcalap import PCALap


class ALE(PCALap):
    """Approximate Laplacian eigenmaps: paper 001 eq. 1 on B-bin marginals of all PCA directions.

    The method of `PCALap` in paper 001's configuration: every PCA direction, B = 50 bins and
    C_D = 500 eigenfunctions. Its eigenvalues (`eigenvalues_`) are the Σ of the semi-supervised
    solve (`pipeline.classify.SemiSupervisedEigenSolver`). New rows are embedded in batches by
    interpolation alone ("Incremental Learning", §3): `transform` never refits, and a row's
    embedding does not depend on the batch it arrives in. `partial_fit` adds rows to the
    histograms (bin edges and rotation stay those of the first call).

    Where it helps (`imgscale bench ale-ceiling`, 10,000-row pools): with every label, ALE + eq. 3
    beats linear ridge on MNIST and USPS pixels (1.04 and 1.05 of its per-class rate), but it
    scores below the exact eigenmaps of a 10-NN graph (1.10 and 1.09). With 3 labelled rows per
    class it trails linear ridge (0.83 and 0.86), where the exact eigenmaps lead (1.34 and 1.27):
    a product of 1-D eigenfunctions cannot follow clusters that span many directions. On 20
    Newsgroups bag-of-words it trails linear ridge at every label count (0.91-0.96).

    Parameters
    ----------
    n_directions : int or None, default=None
        PCA directions; None keeps all of them.
    n_components : int or None, default=500
        C_D, eigenfunctions kept (paper 001 §3); None keeps 2 per direction.
    n_bins : int, default=50
        B (paper 001 §3).
    bandwidth : float, default=0.2
        Fergus et al.'s SIGMA in units of the rows' RMS distance from their mean; one ω for
        every direction (`PCALap._bandwidths`).
    epsilon : float, default=0.1
        Constant added to the normalised histogram before it becomes P (Fergus et al.).

    Attributes
    ----------
    See `PCALap`; `eigenvalues_` is Σ and `eigenfunctions_` the g of paper 001 eq. 1.

    References
    ----------
    Mantziou, Papadopoulos & Kompatsiaris, "Scalable training with approximate incremental
    Laplacian eigenmaps and PCA", ACM MM 2013, §2–3. Fergus, Weiss & Torralba, NIPS 2009.
    """

    def __init__(
        self,
        n_directions: int | None = None,
        n_components: int | None = 500,
        n_bins: int = 50,
        bandwidth: float = 0.2,
        epsilon: float = 0.1,
    ):
        # Only the defaults differ from PCALap's (paper 001 §3's configuration).
        super().__init__(
            n_directions=n_directions,
            n_components=n_components,
            n_bins=n_bins,
            bandwidth=bandwidth,
            epsilon=epsilon,
        )
