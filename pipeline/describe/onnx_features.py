"""A user's CNN, exported to ONNX, as a descriptor: one named output, globally average-pooled."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from imgscale.pipeline.describe._images import check_image_size, check_images

# Images per session run when the model's batch dimension is free: the float32 NCHW input of a
# slice at 224×224 is 19 MiB.
_SLICE = 32


def _onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError as exc:
        raise ImportError(
            "the onnx descriptor needs onnxruntime: pip install 'imgscale[onnx]'"
        ) from exc
    return onnxruntime


# torchvision's classifiers take 224×224 images; used when a model leaves its size free.
DEFAULT_IMAGE_SIZE = 224


def standardised_batch(
    images: np.ndarray, mean: tuple[float, float, float], std: tuple[float, float, float]
) -> np.ndarray:
    """RGB uint8 images (n, h, w, 3) as a model's input: float32 (n, 3, h, w), scaled to [0, 1]
    and standardised per channel, (x − mean) / std.

    Laid out channels first in memory (C-contiguous): converting the transposed view keeps the
    images' channels-last layout, and both the scaling of that strided array and onnxruntime's
    copy of it into a contiguous tensor cost as much as the conversion itself, again."""
    x = images.transpose(0, 3, 1, 2).astype(np.float32, order="C")
    std32 = np.asarray(std, np.float32)
    x *= (1 / (255 * std32))[:, None, None]
    x -= (np.asarray(mean, np.float32) / std32)[:, None, None]
    return x


class OnnxFeatures(TransformerMixin, BaseEstimator):
    """Activations of a CNN given as an ONNX model: the named output for each RGB image, a 4-D
    map (n, C, h, w) averaged over h and w to (n, C), a 2-D output (n, C) as it is.

    Images are fed as float32 NCHW, scaled to [0, 1] and standardised per channel,
    (x − mean) / std (ImageNet statistics by default, as torchvision's models expect). The model
    must take one float tensor of shape (batch, 3, height, width), its batch dimension free or 1;
    images are fed at the size the model declares, or at ``image_size``. Inference runs with
    onnxruntime on the CPU with one thread (a Dask worker runs one task per core). The session
    is built when first needed in each process and is never pickled, so the descriptor ships to
    workers as its parameters.

    Parameters
    ----------
    model : bytes
        The serialised ONNX model.
    output : str or None, default=None
        Name of the output to use; None takes the model's first output.
    image_size : int or None, default=None
        Side of the square RGB images `transform` takes. None: the model's own input size when
        it declares one (square), else 224 (torchvision's classifiers).
    mean, std : tuple of 3 float, default=ImageNet's
        Per-channel standardisation of the [0, 1] input, in RGB order.

    Attributes
    ----------
    n_features_out_ : int
        Channels of the output, found at fit by running one blank image.
    image_size_ : int
        Side of the images fed to the model.
    input_name_ : str
    output_name_ : str

    References
    ----------
    Donahue et al., "DeCAF: a deep convolutional activation feature for generic visual
    recognition", ICML 2014 (activations of a trained CNN as generic descriptors).
    """

    def __init__(
        self,
        model: bytes,
        output: str | None = None,
        image_size: int | None = None,
        mean: tuple[float, float, float] = (0.485, 0.456, 0.406),
        std: tuple[float, float, float] = (0.229, 0.224, 0.225),
    ):
        self.model = model
        self.output = output
        self.image_size = image_size
        self.mean = mean
        self.std = std

    @property
    def image_request(self) -> tuple[str, tuple[int, int]]:
        """What the decoder hands `transform` (once fitted): RGB images of image_size_ ×
        image_size_."""
        check_is_fitted(self)
        return "RGB", (self.image_size_, self.image_size_)

    def fit(self, images: Any = None, y: Any = None) -> OnnxFeatures:
        """Load the model, check its input and output, and find `n_features_out_`."""
        for name in ("mean", "std"):
            value = np.asarray(getattr(self, name), dtype=np.float64)
            if value.shape != (3,) or not np.all(np.isfinite(value)):
                raise ValueError(f"OnnxFeatures: {name} must be 3 finite numbers, got {value}")
        if not np.all(np.asarray(self.std, dtype=np.float64) > 0):
            raise ValueError(f"OnnxFeatures: std must be positive, got {self.std}")
        self.__dict__.pop("_session", None)
        session = self._session_for(self.model)
        inputs = session.get_inputs()
        if len(inputs) != 1 or inputs[0].type != "tensor(float)":
            raise ValueError(
                "OnnxFeatures: the model must take one float tensor, it takes "
                + ", ".join(f"{i.name}: {i.type}" for i in inputs)
            )
        batch, *rest = inputs[0].shape
        if len(rest) != 3 or (isinstance(batch, int) and batch != 1):
            raise ValueError(
                "OnnxFeatures: the model's input must be (batch, 3, height, width) with a free "
                f"or unit batch dimension, got {inputs[0].shape}"
            )
        channels_last = rest[0] != 3 and rest[2] == 3
        if channels_last or (isinstance(rest[0], int) and rest[0] != 3):
            layout = "channels last (NHWC)" if channels_last else f"{rest[0]} channels"
            raise ValueError(
                f"OnnxFeatures: the model's input is {inputs[0].shape}, {layout}; expected "
                "(batch, 3, height, width), channels first (NCHW), as torchvision's models export"
            )
        size = self._input_size(rest[1:])
        outputs = [o.name for o in session.get_outputs()]
        output = outputs[0] if self.output is None else self.output
        if output not in outputs:
            raise ValueError(
                f"OnnxFeatures: the model has no output {output!r}; its outputs are {outputs}"
            )
        self.input_name_ = inputs[0].name
        self.output_name_ = output
        self.image_size_ = size
        self._session = session
        blank = np.zeros((1, size, size, 3), np.uint8)
        self.n_features_out_ = int(self._run(blank).shape[1])
        return self

    def _input_size(self, declared: list[Any]) -> int:
        """``image_size``, else the model's declared square input size, else 224; refused if it
        contradicts what the model declares."""
        static = [d for d in declared if isinstance(d, int)]
        if self.image_size is not None:
            size = check_image_size(self.image_size, "OnnxFeatures")
            if any(d != size for d in static):
                raise ValueError(
                    f"OnnxFeatures: image_size {size}, but the model takes {declared[0]}×"
                    f"{declared[1]} images"
                )
            return size
        if len(static) == 2 and static[0] != static[1]:
            raise ValueError(
                f"OnnxFeatures: the model takes {static[0]}×{static[1]} images; only square "
                "inputs are supported"
            )
        return static[0] if static else DEFAULT_IMAGE_SIZE

    def transform(self, images: Any) -> np.ndarray:
        """Activations: float32 (n, n_features_out_)."""
        check_is_fitted(self)
        images = check_images(images, "RGB", self.image_size_, "OnnxFeatures")
        out = np.empty((len(images), self.n_features_out_), np.float32)
        step = _SLICE if self._batch_is_free() else 1
        for start in range(0, len(images), step):
            out[start : start + step] = self._run(images[start : start + step])
        return out

    def _run(self, images: np.ndarray) -> np.ndarray:
        x = standardised_batch(images, self.mean, self.std)
        (y,) = self._get_session().run([self.output_name_], {self.input_name_: x})
        if y.ndim == 4:
            y = y.mean(axis=(2, 3), dtype=np.float64)
        elif y.ndim != 2:
            raise ValueError(
                f"OnnxFeatures: output {self.output_name_!r} has shape {y.shape}; "
                "a descriptor needs (n, C) or a map (n, C, h, w)"
            )
        return y.astype(np.float32, copy=False)

    def _batch_is_free(self) -> bool:
        return not isinstance(self._get_session().get_inputs()[0].shape[0], int)

    def _get_session(self) -> Any:
        session = self.__dict__.get("_session")
        if session is None:
            session = self._session = self._session_for(self.model)
        return session

    @staticmethod
    def _session_for(model: bytes) -> Any:
        ort = _onnxruntime()
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        try:
            return ort.InferenceSession(
                bytes(model), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own exception types
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ValueError(f"not a valid ONNX model: {message}") from exc

    def __getstate__(self) -> dict:
        state = dict(super().__getstate__())  # object.__getstate__ returns __dict__ itself
        state.pop("_session", None)
        return state
