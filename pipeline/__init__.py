"""Math on arrays: embeddings, classifiers, metrics; numpy or row-chunked dask in and out, no IO.

Other layers use these, and nothing else of the package:

- `imgscale.pipeline.embed` and `imgscale.pipeline.classify`: the estimators their
  ``__init__`` lists (the method modules inside are theirs alone).
- `imgscale.pipeline.describe`: descriptors of decoded image batches (`Gist`, `ColorHistogram`,
  `OnnxFeatures`) and `DESCRIPTORS`, the named settings.
- `imgscale.pipeline.compute`: `compute`, `gather_rows`, and the cluster hook `use_compute`
  through which the jobs layer routes every materialisation (progress on a distributed client).
- `imgscale.pipeline.metrics`: per-class rate, top-k error, precision at 100, (Mi)AP.
- `imgscale.pipeline.gram`: `GRAM_PRECISIONS`, the Gram products' precision choices.
- `imgscale.pipeline.reductions`: `reduce_rows` and the row statistics every estimator shares.
- `imgscale.pipeline.pq_codec`: `PQCodec`, product quantization (train, encode, decode, class
  sums), the codec of PQ stores; `imgscale.pipeline.pq_codes`: its kernels on codes (class sums,
  ADC search).
"""
