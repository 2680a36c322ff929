"""``imgscale ingest --features onnx:efficientnet-lite0.onnx``: a real ImageNet CNN end to end on
the cluster, its rows checked against ONNX Runtime fed by hand. The model is not in the
repository: the test runs when ``$IMGSCALE_DATA/models/efficientnet-lite0.onnx`` exists (the
benchmarks' data folder) and skips, saying so, otherwise; the tiny networks built in
test_features.py and tests/pipeline/describe/test_onnx_features.py cover the same code without
it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from imgscale.jobs.cli import cli
from imgscale.storage import open_store

pytestmark = pytest.mark.slow

MODEL = Path(os.environ.get("IMGSCALE_DATA", "/nonexistent")) / "models/efficientnet-lite0.onnx"
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


@pytest.fixture(scope="module")
def model() -> Path:
    if not MODEL.is_file():
        pytest.skip(
            "needs the EfficientNet-Lite0 ONNX file at $IMGSCALE_DATA/models/"
            "efficientnet-lite0.onnx (IMGSCALE_DATA unset or the file absent)"
        )
    return MODEL


def photos() -> dict[str, Image.Image]:
    """scikit-image's bundled photos, centre-cropped square to 256×256 (so the model's 224×224
    input is a plain bilinear resize, which the reference below does with Pillow)."""
    import skimage.data

    out = {}
    for name in ("chelsea", "coffee"):
        image = Image.fromarray(getattr(skimage.data, name)())
        side = min(image.size)
        left, top = (image.width - side) // 2, (image.height - side) // 2
        out[name] = image.crop((left, top, left + side, top + side)).resize((256, 256))
    return out


def by_hand(model: Path, image: Image.Image, output: str) -> np.ndarray:
    """ONNX Runtime alone on the image as the model's README says to feed it."""
    import onnxruntime

    pixels = np.asarray(image.resize((224, 224), Image.Resampling.BILINEAR), np.float32)
    x = ((pixels / 255 - MEAN) / STD).transpose(2, 0, 1)[None]
    session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return session.run([output], {"image": x})[0][0]


def test_a_real_cnn_describes_photos_as_onnx_runtime_does(model, tmp_path, scheduler_address):
    folder = tmp_path / "photos" / "misc"
    folder.mkdir(parents=True)
    images = photos()
    for name, image in images.items():
        image.save(folder / f"{name}.png")
    store = tmp_path / "cnn.zarr"
    result = CliRunner().invoke(
        cli,
        ["ingest", str(tmp_path / "photos"), str(store), "--features", f"onnx:{model}",
         "--scheduler", scheduler_address, "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert (summary["rows"], summary["dim"]) == (2, 1280)
    opened = open_store(store)
    rows = dict(zip(opened.ids(), opened.features().compute(), strict=True))
    for name, image in images.items():
        expected = by_hand(model, image, "features")
        np.testing.assert_allclose(rows[f"misc/{name}.png"], expected, rtol=1e-4, atol=1e-5)
    # It is the trained network: the logits name the photos' ImageNet classes.
    assert int(np.argmax(by_hand(model, images["coffee"], "logits"))) == 967  # espresso
    assert int(np.argmax(by_hand(model, images["chelsea"], "logits"))) in {281, 282, 285}  # cats
