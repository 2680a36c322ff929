"""OnnxFeatures on tiny networks built with onnx.helper, against the same network in numpy."""

import pickle
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from imgscale.pipeline.describe import OnnxFeatures
from imgscale.pipeline.describe.onnx_features import standardised_batch

SIZE = 8
RNG = np.random.default_rng(3)
WEIGHT = RNG.normal(size=(4, 3, 3, 3)).astype(np.float32)
BIAS = RNG.normal(size=4).astype(np.float32)
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def network(outputs=("features", "map"), batch="n"):
    """Conv 3→4 (3×3, pad 1) + Relu ("map", n×4×8×8) + GlobalAveragePool + Flatten ("features");
    "flat" is the map reshaped to rank 3."""
    nodes = [
        helper.make_node("Conv", ["images", "W", "B"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["map"]),
        helper.make_node("GlobalAveragePool", ["map"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["features"]),
        helper.make_node("Reshape", ["map", "shape"], ["flat"]),
    ]
    shapes = {"features": [batch, 4], "map": [batch, 4, SIZE, SIZE], "flat": [batch, 4, SIZE**2]}
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [batch, 3, SIZE, SIZE])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes[o]) for o in outputs],
        initializer=[
            numpy_helper.from_array(WEIGHT, "W"),
            numpy_helper.from_array(BIAS, "B"),
            numpy_helper.from_array(np.array([0, 4, -1], np.int64), "shape"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def reference_features(images):
    """Normalise, convolve, rectify and average in numpy (float64)."""
    x = images.transpose(0, 3, 1, 2) / 255.0
    x = (x - np.array(MEAN)[:, None, None]) / np.array(STD)[:, None, None]
    x = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = np.zeros((len(images), 4, SIZE, SIZE)) + BIAS[:, None, None]
    for di in range(3):
        for dj in range(3):
            patch = x[:, :, di : di + SIZE, dj : dj + SIZE]
            conv += np.einsum("oc,ncij->noij", WEIGHT[:, :, di, dj], patch)
    return np.maximum(conv, 0).mean(axis=(2, 3))


@pytest.fixture
def images():
    return np.random.default_rng(4).integers(0, 256, (37, SIZE, SIZE, 3), dtype=np.uint8)


@pytest.mark.parametrize("output", [None, "features", "map"])
def test_features_match_the_network_in_numpy(images, output):
    """The first output by default; the 4-D map is average-pooled to the same features."""
    onnx_features = OnnxFeatures(network(), output=output, image_size=SIZE).fit()
    assert onnx_features.n_features_out_ == 4
    got = onnx_features.transform(images)
    assert got.dtype == np.float32 and got.shape == (37, 4)
    np.testing.assert_allclose(got, reference_features(images), rtol=1e-5, atol=1e-5)


def test_a_model_with_a_fixed_batch_of_one_runs_image_by_image(images):
    onnx_features = OnnxFeatures(network(batch=1), image_size=SIZE).fit()
    np.testing.assert_allclose(
        onnx_features.transform(images), reference_features(images), rtol=1e-5, atol=1e-5
    )


def test_an_empty_batch_gives_no_rows():
    out = OnnxFeatures(network(), image_size=SIZE).fit().transform(np.zeros((0, 8, 8, 3), "u1"))
    assert out.shape == (0, 4) and out.dtype == np.float32


def test_a_missing_output_name_is_refused_with_the_outputs_there_are():
    with pytest.raises(
        ValueError, match=r"no output 'logits'; its outputs are \['features', 'map'"
    ):
        OnnxFeatures(network(), output="logits", image_size=SIZE).fit()


def test_an_output_of_rank_3_is_refused():
    with pytest.raises(ValueError, match=r"output 'flat' has shape \(1, 4, 64\)"):
        OnnxFeatures(network(("flat",)), image_size=SIZE).fit()


def test_a_damaged_model_is_refused_at_fit():
    model = network()
    with pytest.raises(ValueError, match=r"^not a valid ONNX model: "):
        OnnxFeatures(model[: len(model) // 2], image_size=SIZE).fit()


def test_images_of_another_size_are_refused(images):
    onnx_features = OnnxFeatures(network(), image_size=SIZE).fit()
    with pytest.raises(ValueError, match=r"shape \(n, 8, 8, 3\), got shape \(2, 16, 16, 3\)"):
        onnx_features.transform(np.zeros((2, 16, 16, 3), np.uint8))


def test_a_pickled_descriptor_leaves_its_session_behind_and_builds_a_new_one(images):
    onnx_features = OnnxFeatures(network(), image_size=SIZE).fit()
    before = onnx_features.transform(images)
    copy = pickle.loads(pickle.dumps(onnx_features))
    assert "_session" in onnx_features.__dict__ and "_session" not in copy.__dict__
    np.testing.assert_array_equal(copy.transform(images), before)
    assert copy.__dict__["_session"] is not onnx_features.__dict__["_session"]
    assert copy.get_params()["model"] == onnx_features.model


def test_the_batch_fed_to_the_model_is_standardised_and_laid_out_channels_first():
    # The model's input written out in float64, pixel by pixel; the batch in memory in that
    # order (a transposed view converted as it is would keep the images' channels-last layout).
    images = RNG.integers(0, 256, size=(2, 5, 4, 3), dtype=np.uint8)
    batch = standardised_batch(images, MEAN, STD)
    expected = np.empty((2, 3, 5, 4))
    for n, c, y, x in np.ndindex(expected.shape):
        expected[n, c, y, x] = (images[n, y, x, c] / 255 - MEAN[c]) / STD[c]
    assert batch.dtype == np.float32 and batch.flags.c_contiguous
    np.testing.assert_allclose(batch, expected, rtol=1e-6, atol=1e-6)


def test_the_session_runs_on_one_thread():
    onnx_features = OnnxFeatures(network(), image_size=SIZE).fit()
    options = onnx_features.__dict__["_session"].get_session_options()
    assert options.intra_op_num_threads == 1


def test_without_onnxruntime_fit_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(ImportError, match=r"pip install 'imgscale\[onnx\]'"):
        OnnxFeatures(network(), image_size=SIZE).fit()
