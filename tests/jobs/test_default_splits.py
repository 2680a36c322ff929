"""One rule for the rows a command reads without --split: learning reads train, scoring reads
test, and writing something for every row reads every row."""

from __future__ import annotations

import numpy as np
from click.testing import CliRunner

from imgscale.jobs import models
from imgscale.jobs.cli import cli
from imgscale.pipeline.classify import NearestClassMean
from imgscale.storage import create_store

RULE = {
    "train": "train",
    "add-class": "train",
    "evaluate": "test",
    "plot": "test",
    "predict": None,
    "export": None,
}


def test_each_command_defaults_to_the_split_the_rule_gives():
    for name, split in RULE.items():
        # The value a command is given when --split is not: parsed as click parses it.
        given = cli.commands[name].make_context(name, [], resilient_parsing=True).params
        assert given["split"] == split, name
    assert "commands that learn (train, add-class) read split train" in cli.help


def test_add_class_without_split_averages_the_train_rows_only(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((90, 4)).astype(np.float32)
    y = np.repeat([0, 1, 2], 30)
    store = create_store(tmp_path / "s.zarr", 4, class_names=["a", "b", "new"])
    store.append("train", X[:60], y[:60], split="train")
    store.append("more", X[60:80], y[60:80], split="train")
    store.append("test", X[80:], y[80:], split="test")
    model = tmp_path / "ncm.model"
    models.save(NearestClassMean().fit(X[:60][y[:60] < 2], y[:60][y[:60] < 2]), model)
    result = CliRunner().invoke(cli, ["add-class", str(model), str(store.path), "--label", "new"])
    assert result.exit_code == 0, result.output
    fitted, _ = models.load(model)
    np.testing.assert_allclose(fitted.means_[-1], X[60:80].mean(axis=0), rtol=1e-6)
