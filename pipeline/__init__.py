"""Math on arrays: embeddings, classifiers, metrics; numpy or row-chunked dask in and out, no IO.

Other layers use these, and nothing else of the package:

- `imgscale.pipeline.embed` and `imgscale.pipeline.classify`: the estimators their
  ``__init__`` lists (the method modules inside are theirs alone).
- `imgscale.pipeline.describe`: descriptors of decoded image batches (`Gist`, `ColorHistogram`,
  `OnnxFeatures`) and `DESCRIPTORS`, the named settings.
- `imgscale.pipeline.compute`: `compute`, `gather_rows`, and `Executor`, what pipeline work
  needs of a cluster, which the jobs layer installs with `use_executor` (progress, its workers);
  `current_executor`, the one pipeline work runs on.
- `imgscale.pipeline.fitted`: the fitted arrays each estimator declares and the check that a
  loaded model's arrays fit together.
- `imgscale.pipeline.metrics`: per-class rate, top-k error, precision at 100, (Mi)AP.
- `imgscale.pipeline.params`: `ParameterError`, an estimator's refusal of a parameter, by name.
- `imgscale.pipeline.gram`: `GRAM_PRECISIONS`, the Gram products' precision choices.
- `imgscale.pipeline.reductions`: `reduce_rows` and the row statistics every estimator shares.
- `imgscale.pipeline.top_k`: `top_k_columns`, the k best columns of each row of scores, and
  `TopK`, the k nearest rows of each query merged over a scan's chunks.
- `imgscale.pipeline.pq`: `PQCodec`, product quantization (train, encode, decode, class
  sums), the codec of PQ stores, and its kernels on codes (class sums, ADC search).
- `imgscale.pipeline.coded_rows`: what a classifier asks of any store codec (`RowDecoder`,
  `RowStatsOnCodes`) and the statistics of the rows codes decode to.
"""
