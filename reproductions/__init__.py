"""The five papers' experiments on the data sets of their protocols (CIFAR-10, MNIST, USPS,
20 Newsgroups: a data folder given as ``--data-dir``), apart from the product: a distribution of
its own, ``imgscale-reproductions``, whose benchmarks ``imgscale bench`` runs beside its own with
the same flags and records (docs/results.md, docs/findings/).

Each module defines benchmarks through ``imgscale.bench``'s interface; :data:`MODULES` lists them
in the order the suite runs them, and the ``imgscale.benchmarks`` entry point of this
distribution's pyproject.toml names that list, so that the harness finds them without naming
this package (imgscale never imports it).
"""

MODULES = (
    "accuracy",
    "protocols",
    "cifar10_gist",
    "bow_fisher",
    "ale_ceiling",
    "local",
    "hope",
    "natural_local",
    "rare_local",
    "natural_embeddings",
    "natural_hope",
    "natural_ale",
    "natural_ncm",
    "cifar10_cnn",
)
