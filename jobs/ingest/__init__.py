"""``imgscale ingest``: images or vectors into a store, and what ingests share with the fits
that sample a source (``fit-features``, a PQ codebook).

- `is_image_source`: whether an ingest reads images (else a file of vectors).
- `ingest_file` (`vectors`): ``imgscale ingest`` of a file of vectors, streamed in row blocks
  and committed as one batch (`Ingested` says what it did).
- `plan_ingest` (`plan`): the images a store lacks, cut into tasks, found on the client before
  any cluster is needed; `nothing_to_do` summarises a plan with no new image.
- `ingest_image_source` (`images`): ``imgscale ingest`` of images, from the plan to the listing
  kept for the next run; `ingest_images`, the planned images described on the cluster and
  committed.
- `worker`: the one loop a worker runs on a partition (read → hash → decode), and what each
  use describes from it (`describe_partition`, `signatures_of_sample`).
- `commit`: the client's side (each partition's outcome received, rows committed in a thread).
- `codec`: the one PQ trainer (`train_pq`), a block of sub-spaces a task, and a new PQ store's
  codebook trained on a sample of its source (`train_codec`).
- `sample`: a sample of a source's images (`sample_partitions`).
- `known`, `changes`, `whole_files`: what the store holds (the committed rows holding given
  content, `known.committed_holders`, for images and vectors alike), the files that changed
  since their last ingest (`forget_changed`, `keep_listing`), and the files committed whole.

Nothing here imports scikit-learn, numba, dask or distributed until there is work: an ingest
that finds nothing new stays a quick look at the listing and the store.
"""

from imgscale.jobs.ingest.changes import forget_changed, keep_listing
from imgscale.jobs.ingest.codec import train_codec, train_pq
from imgscale.jobs.ingest.images import ingest_image_source, ingest_images, nothing_to_do
from imgscale.jobs.ingest.known import known_of
from imgscale.jobs.ingest.plan import (
    DEFAULT_PQ_SAMPLE,
    IMAGES_PER_PARTITION,
    TASKS_PER_THREAD_AT_LEAST,
    IngestPlan,
    is_image_source,
    partition_size,
    plan_ingest,
    starts_a_store,
)
from imgscale.jobs.ingest.sample import SampledPartition, sample_partitions
from imgscale.jobs.ingest.vectors import Ingested, ingest_file
from imgscale.jobs.ingest.worker import describe_partition, read_and_decode

__all__ = [
    "DEFAULT_PQ_SAMPLE",
    "IMAGES_PER_PARTITION",
    "TASKS_PER_THREAD_AT_LEAST",
    "IngestPlan",
    "Ingested",
    "SampledPartition",
    "describe_partition",
    "forget_changed",
    "ingest_file",
    "ingest_image_source",
    "ingest_images",
    "is_image_source",
    "keep_listing",
    "known_of",
    "nothing_to_do",
    "partition_size",
    "plan_ingest",
    "read_and_decode",
    "sample_partitions",
    "starts_a_store",
    "train_codec",
    "train_pq",
]
