"""`imgscale compress` on digits: a PQ store that reads like the raw one, within stated tolerances.

Tolerances: sklearn digits (64-D, 1,797 rows) with M=32 (2-dim sub-vectors) changes the test
per-class rate of ridge and of NCM by at most 0.03 from the raw store's; with M=16 by at most 0.06.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from click.testing import CliRunner

from imgscale.jobs.cli import cli
from imgscale.jobs.compress import compress
from imgscale.jobs.train import train
from imgscale.pipeline.metrics import per_class_rate
from imgscale.pipeline.pq import PQCodec
from imgscale.storage import StoreError, create_store, open_store


def _compress(digits_store, dst, m, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # digits has fewer than 39×256 rows to train on
        # 10 Lloyd iterations instead of 25 keep the test fast; the tolerances hold with either.
        return compress(digits_store, dst, m, **{"niter": 10, **kwargs})


@pytest.fixture(scope="module")
def pq32(digits_store, tmp_path_factory):
    dst = tmp_path_factory.mktemp("pq") / "digits-pq32.zarr"
    summary = _compress(digits_store, dst, 32)
    return open_store(dst), summary


def test_compressed_store_keeps_rows_ids_labels_splits_and_batches(digits_store, pq32):
    store, _ = pq32
    assert store.encoding == "pq" and store.committed_rows == digits_store.committed_rows
    assert store.rows().to_pylist() == digits_store.rows().to_pylist()
    assert store.class_names == digits_store.class_names
    assert [store.has_batch(b) for b in ("train", "val", "test")] == [True] * 3
    assert store.features().chunks == digits_store.features().chunks


@pytest.mark.parametrize("rotate", [False, True], ids=["plain", "rotated"])
def test_the_codec_trained_a_block_of_sub_spaces_a_task_is_pq_trained_on_the_whole_sample(
    digits_store, tmp_path, rotate
):
    """compress trains its codec with ingest --pq's trainer, a block of sub-spaces a task: the
    codebook (and rotation) is the one faiss learns on all sub-spaces of the sample at once."""
    summary = _compress(digits_store, tmp_path / "pq.zarr", 16, rotate=rotate, seed=3)
    X = digits_store.features().compute()  # 1,797 rows: the sample is every row
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = PQCodec.train(X, 16, rotate=rotate, seed=3, niter=10)
    codec = open_store(tmp_path / "pq.zarr").codec
    assert summary["rows"] == len(X)
    np.testing.assert_allclose(codec.codebook, expected.codebook, atol=1e-4)
    if rotate:
        np.testing.assert_array_equal(codec.rotation, expected.rotation)
    else:
        assert codec.rotation is None


def test_compressed_rows_are_the_codec_applied_to_the_raw_rows(digits_store, pq32):
    store, _ = pq32
    X = digits_store.features().compute()
    codec = store.codec
    np.testing.assert_array_equal(store.codes().compute(), codec.encode(X))
    np.testing.assert_array_equal(store.features().compute(), codec.decode(codec.encode(X)))


def test_reported_relative_mse_is_error_over_total_variance(digits_store, pq32):
    store, summary = pq32
    X = digits_store.features().compute().astype(np.float64)
    Xhat = store.features().compute().astype(np.float64)
    mse = ((X - Xhat) ** 2).sum(axis=1).mean()
    variance = X.var(axis=0).sum()
    # The error is summed from the encoder's float32 distances (‖x‖² − 2x·c + ‖c‖², BLAS), not
    # from decoded rows: on digits' integer features it is 4e-5 off the float64 reference.
    assert summary["mse"] == pytest.approx(mse, rel=1e-4)
    assert summary["relative_mse"] == pytest.approx(mse / variance, rel=1e-4)
    assert 0 < summary["relative_mse"] < 0.1


@pytest.mark.parametrize(("m", "tolerance"), [(32, 0.03), (16, 0.06)])
@pytest.mark.parametrize("method", ["ridge", "ncm"])
def test_classifiers_on_the_pq_store_score_close_to_the_raw_store(
    digits_store, tmp_path, m, tolerance, method
):
    _compress(digits_store, tmp_path / "pq.zarr", m)
    store = open_store(tmp_path / "pq.zarr")
    rates = []
    for s in (digits_store, store):
        model = train(s, method)
        rates.append(per_class_rate(s.labels("test"), model.predict(s.features("test")).compute()))
    assert abs(rates[0] - rates[1]) <= tolerance, rates
    assert rates[1] > 0.85


def test_ncm_on_a_pq_store_uses_codes_and_equals_the_mean_of_decoded_rows(pq32, monkeypatch):
    store, _ = pq32
    X = store.features("train").compute()
    y = store.labels("train")
    # Any decoded row would go through PQCodec.decode: forbid it while training.
    monkeypatch.setattr(PQCodec, "decode", lambda *a, **k: pytest.fail("decoded rows"))
    model = train(store, "ncm")
    expected = np.stack([X[y == c].mean(axis=0) for c in range(10)])
    np.testing.assert_allclose(model.means_, expected, rtol=1e-5, atol=1e-5)


def test_m_not_dividing_d_fails_before_anything_is_written(digits_store, tmp_path):
    with pytest.raises(StoreError, match="M=5 sub-quantizers do not divide D=64"):
        compress(digits_store, tmp_path / "pq.zarr", 5)
    assert not (tmp_path / "pq.zarr").exists()


def test_failure_while_encoding_leaves_no_store(digits_store, tmp_path, monkeypatch):
    calls = []

    def failing(codec, X):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("worker died")
        return real(codec, X)

    real = PQCodec.encode_with_sums
    monkeypatch.setattr(PQCodec, "encode_with_sums", failing)
    with pytest.raises(RuntimeError, match="worker died"):
        _compress(digits_store, tmp_path / "pq.zarr", 16)
    assert not (tmp_path / "pq.zarr").exists()


def test_existing_destination_is_refused(digits_store, pq32):
    store, _ = pq32
    before = (store.path / "zarr.json").read_bytes()
    with pytest.raises(StoreError, match="not empty"):
        compress(digits_store, store.path, 16)
    assert (store.path / "zarr.json").read_bytes() == before


def test_cli_compress_and_info_report_encoding_m_and_compression(digits_store, tmp_path):
    runner = CliRunner()
    dst = tmp_path / "pq.zarr"
    result = runner.invoke(
        cli, ["compress", str(digits_store.path), str(dst), "--m", "16", "--json"]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["pq_m"] == 16 and 0 < summary["relative_mse"] < 0.2
    info = json.loads(runner.invoke(cli, ["info", str(dst), "--json"]).stdout)
    assert info["encoding"] == "pq" and info["pq_m"] == 16 and info["rows"] == 1797
    assert info["compression_ratio"] > 2


def test_a_given_codec_is_used_instead_of_training(digits_store, pq32, tmp_path):
    store, _ = pq32
    compress(digits_store, tmp_path / "again.zarr", 32, codec=store.codec)
    np.testing.assert_array_equal(
        open_store(tmp_path / "again.zarr").codes().compute(), store.codes().compute()
    )
    with pytest.raises(StoreError, match="M=32; expected D=64, M=16"):
        compress(digits_store, tmp_path / "other.zarr", 16, codec=store.codec)
    assert not (tmp_path / "other.zarr").exists()


def test_a_store_without_class_names_compresses_with_its_integer_labels(tmp_path):
    rng = np.random.default_rng(0)
    store = create_store(tmp_path / "unnamed.zarr", 8, rows_per_chunk=64)
    labels = rng.integers(-1, 5, 300)
    store.append("b", rng.standard_normal((300, 8)).astype(np.float32), labels)
    _compress(store, tmp_path / "pq.zarr", 4)
    np.testing.assert_array_equal(open_store(tmp_path / "pq.zarr").labels(), labels)
