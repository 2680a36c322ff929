"""A codec from outside imgscale: an 8-bit scalar quantizer (each dimension's range cut into 256
steps), defined here and registered by a real ``imgscale.codecs`` entry point of a distribution
written for the test. A store is created with it, NCM is trained on its codes and evaluated
through the commands, against a dense numpy NCM on the decoded rows; no file of imgscale names it.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import numpy as np
import pytest
from click.testing import CliRunner

from imgscale.jobs import models
from imgscale.jobs.cli import cli
from imgscale.storage import create_coded_store, open_store

NAMES, DIM = ["a", "b", "c", "d"], 6
LEVELS = 255


class Scalar8Codec:
    """Each value x of dimension j as round((x − low_j) / step_j), step_j = (high_j − low_j)/255:
    a row is kept as D uint8 codes, its two arrays (low, high) beside them."""

    encoding: ClassVar[str] = "scalar8"

    def __init__(self, low: np.ndarray, high: np.ndarray) -> None:
        self.low, self.high = np.asarray(low, np.float32), np.asarray(high, np.float32)
        self.dim = self.code_width = len(self.low)

    @classmethod
    def train(cls, X: np.ndarray) -> Scalar8Codec:
        return cls(X.min(axis=0), X.max(axis=0))

    def _step(self) -> np.ndarray:
        return np.where(self.high > self.low, (self.high - self.low) / LEVELS, 1).astype(np.float32)

    def encode(self, X: np.ndarray) -> np.ndarray:
        return np.clip(np.rint((X - self.low) / self._step()), 0, LEVELS).astype(np.uint8)

    def decode(self, codes: np.ndarray) -> np.ndarray:
        return (self.low + codes.astype(np.float32) * self._step()).astype(np.float32)

    def check(self, dim: int) -> None:
        ranges = np.stack([self.low, self.high]) if self.low.shape == self.high.shape else None
        if ranges is None or ranges.shape != (2, dim) or not np.isfinite(ranges).all():
            raise ValueError(
                f"low/high of {self.low.shape}, {self.high.shape}; expected finite ({dim},)"
            )

    def stored(self) -> dict[str, Any]:
        return {"bits": 8}

    def stored_arrays(self) -> dict[str, np.ndarray]:
        return {"low": self.low, "high": self.high}

    @staticmethod
    def stored_layout(params: Any, dim: int) -> tuple[int, dict[str, tuple[int, ...]]]:
        if not isinstance(params, dict) or params.get("bits") != 8:
            raise ValueError(f"scalar8 parameters {params!r}; expected {{'bits': 8}}")
        return dim, {"low": (dim,), "high": (dim,)}

    @staticmethod
    def describe(params: dict[str, Any]) -> dict[str, Any]:
        return {"scalar8_bits": params["bits"]}

    @classmethod
    def from_stored(cls, params: dict[str, Any], arrays: dict[str, np.ndarray]) -> Scalar8Codec:
        codec = cls(arrays["low"], arrays["high"])
        codec.check(len(codec.low))
        return codec


@pytest.fixture
def scalar8_installed(tmp_path, monkeypatch):
    """A distribution declaring the codec under ``imgscale.codecs``, on the import path: found
    by `importlib.metadata` as an installed package's entry point is."""
    site = tmp_path / "site"
    info = site / "imgscale_scalar8-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: imgscale-scalar8\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[imgscale.codecs]\nscalar8 = {__name__}:{Scalar8Codec.__name__}\n"
    )
    monkeypatch.syspath_prepend(str(site))


def _rows(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Overlapping classes, so that some rows are misclassified."""
    centres = np.random.default_rng(7).normal(scale=1.5, size=(len(NAMES), DIM))
    rng = np.random.default_rng(seed)
    y = rng.integers(0, len(NAMES), n).astype(np.int32)
    return (centres[y] + rng.normal(size=(n, DIM))).astype(np.float32), y


def _imgscale(*args: Any) -> dict[str, Any]:
    result = CliRunner().invoke(cli, [*map(str, args), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_store_of_a_codec_registered_outside_trains_and_evaluates_ncm_like_numpy(
    scalar8_installed, tmp_path
):
    X, y = _rows(400, 0)
    X_test, y_test = _rows(300, 1)
    codec = Scalar8Codec.train(X)
    path = tmp_path / "scalar8.zarr"
    created = create_coded_store(path, codec, class_names=NAMES, rows_per_chunk=64)
    created.append("train", codec.encode(X), y)
    created.append("test", codec.encode(X_test), y_test, split="test")

    store = open_store(path)  # the codec loaded again from the store, through the entry point
    assert store.encoding == "scalar8" and type(store.codec).__name__ == "Scalar8Codec"
    decoded, decoded_test = codec.decode(codec.encode(X)), codec.decode(codec.encode(X_test))
    np.testing.assert_array_equal(store.features("train").compute(), decoded)
    assert _imgscale("info", path)["scalar8_bits"] == 8

    model_path = tmp_path / "ncm.model"
    _imgscale("train", path, model_path, "--method", "ncm")
    evaluated = _imgscale("evaluate", model_path, path)

    # Dense NCM on the decoded rows: float64 means, nearest by squared distance.
    means = np.stack([decoded[y == c].astype(np.float64).mean(axis=0) for c in range(len(NAMES))])
    distances = ((decoded_test[:, None, :] - means[None]) ** 2).sum(axis=2)
    nearest = np.sort(distances, axis=1)
    assert (nearest[:, 1] - nearest[:, 0]).min() > 1e-3  # no near-tie that rounding could flip
    predicted = distances.argmin(axis=1)
    model, _ = models.load(model_path)
    np.testing.assert_allclose(model.means_, means, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(model.class_counts_, np.bincount(y))
    rates = [(predicted[y_test == c] == c).mean() for c in range(len(NAMES))]
    assert 0.5 < evaluated["per_class_rate"] < 1
    assert evaluated["per_class_rate"] == pytest.approx(np.mean(rates), abs=1e-12)
    assert evaluated["top1_error"] == pytest.approx((predicted != y_test).mean(), abs=1e-12)
