"""`--features`: names to descriptors, the record a store keeps, and the checks against it."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from imgscale.jobs.features import (
    WARM_SETTINGS,
    check_same_features,
    features_of_store,
    parse_features,
    vocabulary_sha256,
    warm_builds,
)
from imgscale.pipeline.describe import DESCRIPTORS, BagOfWords, FisherVector
from imgscale.storage import StoreError


def tiny_network(path, scale: float = 1.0) -> None:
    """A 1×1 convolution RGB -> 2 channels, then global average pooling, saved to ``path``."""
    weight = (scale * np.arange(6, dtype=np.float32).reshape(2, 3, 1, 1)) / 10
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["images", "W"], ["map"]),
            helper.make_node("GlobalAveragePool", ["map"], ["pooled"]),
        ],
        "tiny",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["n", 3, 16, 16])],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["n", 2, 1, 1])],
        initializer=[numpy_helper.from_array(weight, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())


def test_names_are_concatenated_in_order_with_their_widths():
    features = parse_features("gist-tiny, color")
    assert [e["name"] for e in features.record["features"]] == ["gist-tiny", "color"]
    assert [e["dim"] for e in features.record["features"]] == [320, 128]
    assert features.dim == 448
    assert [(r.mode, r.size) for r in features.requests] == [("L", (32, 32)), ("RGB", (32, 32))]
    rng = np.random.default_rng(0)
    grey = rng.integers(0, 256, (3, 32, 32), dtype=np.uint8)
    rgb = rng.integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    rows = features.describe([[grey[i], rgb[i]] for i in range(3)])
    expected = np.hstack(
        [
            DESCRIPTORS["gist-tiny"]().fit().transform(grey),
            DESCRIPTORS["color"]().fit().transform(rgb),
        ]
    )
    np.testing.assert_allclose(rows, expected, rtol=1e-6)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gits", "unknown descriptor 'gits'"),
        ("gist,,color", "names separated by commas"),
        ("onnx:", "expected onnx:PATH"),
        ("onnx:missing.onnx", "is not a file"),
        ("color:8", "unknown descriptor 'color:8'"),
    ],
)
def test_bad_feature_names_are_refused_in_one_line(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_features(spec)


@pytest.mark.parametrize(
    ("shape", "layout"),
    [(["n", 32, 32, 3], "channels last (NHWC)"), (["n", "h", "w", 3], "channels last (NHWC)"),
     (["n", 1, 32, 32], "1 channels")],
)  # fmt: skip
def test_an_onnx_input_not_of_three_channels_first_is_refused_naming_its_layout(
    tmp_path, shape, layout
):
    """Not read as a "32×3 image": the message names the layout found and the one expected."""
    graph = helper.make_graph(
        [helper.make_node("ReduceMean", ["images"], ["pooled"], axes=[1, 2], keepdims=0)],
        "channels-last",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    (tmp_path / "nhwc.onnx").write_bytes(model.SerializeToString())
    with pytest.raises(ValueError) as caught:
        parse_features(f"onnx:{tmp_path / 'nhwc.onnx'}")
    message = str(caught.value)
    assert message.startswith(f"--features 'onnx:{tmp_path / 'nhwc.onnx'}': ")
    assert f"{layout}; expected (batch, 3, height, width), channels first (NCHW)" in message
    assert "square" not in message and "\n" not in message


def test_the_record_survives_json_and_rebuilds_the_same_descriptors(tmp_path):
    tiny_network(tmp_path / "tiny.onnx")
    features = parse_features(f"gist-tiny,onnx:{tmp_path / 'tiny.onnx'}")
    record = json.loads(json.dumps(features.record))
    rebuilt = features_of_store(record, "s.zarr")
    check_same_features(record, rebuilt, "s.zarr")
    assert rebuilt.steps[1].image_request == ("RGB", (16, 16))  # the size the model declares
    images = [[np.full((32, 32), 7 * i, np.uint8), np.full((16, 16, 3), 9 * i, np.uint8)]
              for i in range(2)]  # fmt: skip
    np.testing.assert_array_equal(rebuilt.describe(images), features.describe(images))
    # The 1×1 convolution of a constant image, averaged: W · ((v/255 − mean) / std).
    weight = np.arange(6, dtype=np.float32).reshape(2, 3) / 10
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    expected = weight @ ((9 / 255 - mean) / std)
    np.testing.assert_allclose(features.describe(images)[1, 320:], expected, rtol=1e-5)


def test_a_store_refuses_rows_described_otherwise():
    record = parse_features("gist-tiny").record
    with pytest.raises(StoreError, match="described by gist-tiny; refusing rows described by gist"):
        check_same_features(record, parse_features("gist"), "s.zarr")
    with pytest.raises(StoreError, match="holds vectors"):
        check_same_features(None, parse_features("gist"), "s.zarr")


def test_an_onnx_model_whose_bytes_changed_is_refused(tmp_path):
    model = tmp_path / "tiny.onnx"
    tiny_network(model)
    record = json.loads(json.dumps(parse_features(f"onnx:{model}").record))
    tiny_network(model, scale=2.0)
    with pytest.raises(StoreError, match="sha256"):
        features_of_store(record, "s.zarr")
    with pytest.raises(StoreError, match="refusing rows"):
        check_same_features(record, parse_features(f"onnx:{model}"), "s.zarr")


@pytest.mark.parametrize(
    ("vocabulary_class", "params", "attribute", "digest"),
    [
        # Digests of these vocabularies as imgscale computed them before the SIFT window became
        # a parameter: the identity a store recorded for a vocabulary must stay the same. A
        # vocabulary file keeps its parameters, so one fitted then keeps EM's tolerance of
        # then (1e-4; the default is scikit-learn's 1e-3 now).
        (
            BagOfWords,
            {},
            "vocabulary_",
            "c90924fd4a6a388f9b2f5625124d77fca148dbd8d17130a9a52c45589de4d0a8",
        ),
        (
            FisherVector,
            {"tol": 1e-4},
            "means_",
            "30b12aa2204787a6a1152bf48d71d8bb815697f74524ef39194a9e122f582c3e",
        ),
    ],
)
def test_a_vocabulary_at_the_old_sift_window_keeps_the_identity_stores_recorded(
    vocabulary_class, params, attribute, digest
):
    vocabulary = vocabulary_class(**params)
    setattr(vocabulary, attribute, np.arange(12, dtype=np.float32).reshape(3, 4))
    assert vocabulary_sha256(vocabulary) == digest
    vocabulary.set_params(sift_window=2.25)
    assert vocabulary_sha256(vocabulary) != digest


def test_a_process_builds_each_setting_once_and_keeps_it_warm(tmp_path):
    tiny_network(tmp_path / "tiny.onnx")
    features = parse_features(f"gist-tiny,onnx:{tmp_path / 'tiny.onnx'}")
    before = warm_builds()
    first = pickle.loads(pickle.dumps(features))
    # Built once, and warmed: the ONNX session exists before any task.
    assert warm_builds() == before + 1
    assert "_session" in vars(first.steps[1])
    session = first.steps[1]._session
    again = pickle.loads(pickle.dumps(features))
    assert again is first and again.steps[1]._session is session
    assert warm_builds() == before + 1
    images = [[np.full((32, 32), 7 * i, np.uint8), np.full((16, 16, 3), 9 * i, np.uint8)]
              for i in range(2)]  # fmt: skip
    np.testing.assert_array_equal(again.describe(images), features.describe(images))
    # Another setting is another entry; the record, not the object, is the key.
    other = pickle.loads(pickle.dumps(parse_features("gist-tiny")))
    assert other is not first and warm_builds() == before + 2
    assert pickle.loads(pickle.dumps(parse_features("gist-tiny"))) is other


def test_a_process_keeps_a_bounded_number_of_settings(tmp_path):
    settings = []
    for i in range(WARM_SETTINGS + 1):  # one model at several paths: records that differ
        tiny_network(tmp_path / f"tiny{i}.onnx")
        settings.append(parse_features(f"onnx:{tmp_path / f'tiny{i}.onnx'}"))
    kept = [pickle.loads(pickle.dumps(f)) for f in settings]
    builds = warm_builds()
    # The most recent WARM_SETTINGS are kept; the first one is built again.
    assert pickle.loads(pickle.dumps(settings[-1])) is kept[-1]
    assert pickle.loads(pickle.dumps(settings[0])) is not kept[0]
    assert warm_builds() == builds + 1
