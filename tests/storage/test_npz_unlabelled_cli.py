"""`imgscale ingest --unlabelled`: the way past the refusal of an npz whose labels may sit under
another name (issue 28, finding 7)."""

import numpy as np
from click.testing import CliRunner

from imgscale.jobs.cli import cli
from imgscale.storage import open_store


def test_labels_under_another_name_are_refused_and_unlabelled_says_there_are_none(tmp_path):
    X = np.random.default_rng(0).normal(size=(20, 3)).astype(np.float32)
    np.savez(tmp_path / "l.npz", X=X, labels=np.arange(20) % 2)
    store = str(tmp_path / "s.zarr")
    refused = CliRunner().invoke(cli, ["ingest", str(tmp_path / "l.npz"), store])
    assert refused.exit_code != 0 and "--y-key labels" in str(refused.exception)
    taken = CliRunner().invoke(cli, ["ingest", str(tmp_path / "l.npz"), store, "--unlabelled"])
    assert taken.exit_code == 0, taken.output
    assert (open_store(store).labels() == -1).all()
