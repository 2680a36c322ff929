"""Product quantization codebooks trained a block of sub-spaces a task: the one PQ trainer of
``imgscale ingest --pq`` (the signatures of a sample of the source's images, held on the
workers that computed them: the client never holds the sample, 2.4 GiB at 64K-D) and of
``imgscale compress`` (a uniform sample of a store's rows).

Each sub-space's k-means sees only its own columns, so a codebook trained a block at a time is
the one `PQCodec.train` learns on all of them at once (a rotated store's sample is rotated by
the same seeded rotation first), and the thousands of k-means of a large codebook share the
cluster's cores instead of running one after the other on the client.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from imgscale.jobs.ingest.sample import sample_partitions
from imgscale.jobs.ingest.worker import signatures_of_sample

if TYPE_CHECKING:
    from imgscale.jobs.ingest.plan import IngestPlan
    from imgscale.pipeline.pq import PQCodec

# Blocks of sub-spaces a worker thread trains: the last block leaves the other cores idle for no
# longer than about half a block's k-means.
BLOCKS_PER_THREAD = 2

RunBlocks = Callable[[Callable, list[tuple]], Iterable[tuple[int, np.ndarray]]]
"""``run(kernel, items)`` yields ``(i, kernel(sample, *items[i]))`` as each block is trained,
``sample`` being the training rows as a list of arrays (one a partition) wherever they are."""

# (stage, done, total, unit): progress of work in stages, e.g. ("pq codebook", 512, 8192,
# "sub-quantizers").
StageProgress = Callable[[str, int, int, str], None]


def train_pq(
    run: RunBlocks,
    dim: int,
    m: int,
    *,
    threads: int,
    seed: int = 0,
    rotate: bool = False,
    niter: int = 25,
    progress: Callable[[int, int], None] | None = None,
) -> PQCodec:
    """A codec of ``m`` sub-quantizers for rows of ``dim`` values, its sub-spaces trained in
    blocks (`BLOCKS_PER_THREAD` for each of ``threads``) through ``run``; ``rotate`` first
    rotates the rows by `random_rotation` of ``seed``, as `PQCodec.train` does. ``progress(done,
    m)`` is told the sub-quantizers trained as blocks finish."""
    from imgscale.pipeline.pq import PQCodec, random_rotation

    rotation = random_rotation(dim, seed) if rotate else None
    dsub = dim // m
    blocks = np.array_split(np.arange(m), min(m, BLOCKS_PER_THREAD * max(1, threads)))
    items = []
    for block in blocks:
        columns = (int(block[0]) * dsub, (int(block[-1]) + 1) * dsub)
        turn = None if rotation is None else rotation[:, columns[0] : columns[1]]
        items.append((columns, len(block), turn))
    codebooks: list[Any] = [None] * len(blocks)
    done = 0
    for i, codebook in run(partial(train_sub_spaces, seed=seed, niter=niter), items):
        codebooks[i] = codebook
        done += len(blocks[i])
        if progress is not None:
            progress(done, m)
    return PQCodec(np.concatenate(codebooks), rotation)


def train_sub_spaces(
    sample: Sequence[np.ndarray],
    columns: tuple[int, int],
    m: int,
    rotation: np.ndarray | None,
    *,
    seed: int,
    niter: int,
) -> np.ndarray:
    """Codebook (m, 256, dsub) of the ``m`` consecutive sub-spaces in ``columns`` of the rows
    of ``sample`` (one array a partition), rotated by ``rotation``'s columns for them if given,
    trained on those columns alone (runs on a worker; faiss on one thread, as the worker has
    one core)."""
    import faiss

    from imgscale.pipeline.pq import PQCodec

    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        with warnings.catch_warnings():  # the client warned of a small sample already
            warnings.simplefilter("ignore")
            if rotation is None:
                rows = np.concatenate([part[:, columns[0] : columns[1]] for part in sample])
            else:
                rows = np.concatenate([part @ rotation for part in sample])
            return PQCodec.train(rows, m, seed=seed, niter=niter).codebook
    finally:
        faiss.omp_set_num_threads(threads)


def train_codec(
    plan: IngestPlan, client: Any, progress: StageProgress | None = None
) -> tuple[PQCodec, int]:
    """A PQ codec of ``plan.pq`` sub-quantizers trained on the signatures of ``plan.pq_sample``
    images of the source (drawn as ``fit-features`` draws its sample), and the number of
    signatures it was trained on. The signatures are computed on ``client``'s cluster and stay
    there. ``progress`` is told the sampled images described, then the sub-quantizers trained,
    as tasks finish."""
    from imgscale.jobs.cluster import ClusterChunks
    from imgscale.pipeline.pq import check_training_rows

    items = sample_partitions(plan.source, plan.pq_sample, plan.pq_seed, plan.source_options)
    signatures = ClusterChunks.compute(client, signatures_of_sample, (plan.features,), items)
    tell = progress or (lambda *_: None)
    n, asked = 0, sum(item.asked for item in items)
    for rows in signatures.as_finished(len):
        n += rows
        tell("pq sample", n, asked, "images")
    try:
        check_training_rows(n)
    except ValueError as exc:
        raise ValueError(f"--pq-sample {plan.pq_sample}: {exc}") from None
    codec = train_pq(
        signatures.each_over_all, plan.features.dim, plan.pq, threads=signatures.threads(),
        seed=plan.pq_seed, progress=lambda done, m: tell("pq codebook", done, m, "sub-quantizers"),
    )  # fmt: skip
    return codec, n
