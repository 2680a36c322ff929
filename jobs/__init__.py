"""What users do with imgscale, one use case a module, over `imgscale.storage` and
`imgscale.pipeline`; `jobs.cli` is the ``imgscale`` command line that parses, calls one of them
and prints.

Use cases (each saves its own output):

- Images and vectors in: `ingest` (``imgscale ingest``: images planned, described on the
  workers and committed, `ingest_image_source`; a file of vectors streamed into one batch,
  `ingest_file`; the files changed since they were ingested and those committed whole),
  `fit_vocabulary` (the vocabulary of bag-of-words and Fisher-vector descriptors).
- What describes images: `descriptors` (the table of descriptors ``--features`` names),
  `features` (building them and the record a store keeps of them), `feature_records` (that
  record compared and named without building anything).
- Models: `methods` (the table of training methods and embeddings), `train`, `evaluate`,
  `predict`, `plot`, `embed_store` (a store embedded into another, batch by batch),
  `add_class`, `update` (a model brought up to date with its store), `compress` (a store
  product-quantized), `models` (saving and loading a model, and its record of its store),
  `class_names` (a model's classes matched to a store's by name), `demo`.
- The cluster: `cluster`, the only code holding a Dask client (connect, or start a local
  cluster sized to the machine; independent tasks fanned out, `cluster.fanout`), `on_cluster`
  (a use case's preamble: a store, or a model and a store, opened on the cluster).
- Runs: `runs` (every computing command recorded in the run ledger), `spec` (job specs),
  `schedule` (a command on a timer), `detached` and `driver` (runs that live on the cluster).
"""
