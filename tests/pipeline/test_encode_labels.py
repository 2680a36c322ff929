"""encode_labels: class indices against a dictionary lookup, on both of its paths."""

import numpy as np
import pytest

from imgscale.pipeline.classify._base import encode_labels


def dict_lookup(y, classes):
    position = {c: i for i, c in enumerate(classes.tolist())}
    return np.array([-1 if v == -1 else position[v] for v in y.tolist()])


@pytest.mark.parametrize(
    "classes",
    [
        np.array([7, 0, 3, 12]),  # small integer ids: the lookup table
        np.array([7, 0, 3, 10**9]),  # too sparse for a table: sorted search
        np.array([7.0, 0.5, 3.0]),  # floats: sorted search
    ],
)
def test_class_indices_equal_a_dictionary_lookup(classes):
    rng = np.random.default_rng(0)
    y = rng.choice(np.append(classes, -1), 500)
    np.testing.assert_array_equal(encode_labels(y, classes), dict_lookup(y, classes))


def test_string_labels_are_never_unlabelled():
    classes = np.array(["cat", "dog"])
    np.testing.assert_array_equal(encode_labels(np.array(["dog", "cat"]), classes), [1, 0])


@pytest.mark.parametrize("bad", [5, 13, -2, 10**6])
@pytest.mark.parametrize("classes", [np.array([7, 0, 3, 12]), np.array([7, 0, 3, 10**9])])
def test_unknown_labels_are_named(classes, bad):
    y = np.array([0, 3, bad, -1])
    with pytest.raises(ValueError, match=rf"labels \[{bad}\] are not among the classes"):
        encode_labels(y, classes)
