"""First-order optimisers on a flat parameter vector θ, validated as they go.

`adam` steps on minibatch gradients, `lbfgs` on full-batch objectives (one streaming pass each);
both hand their iterates to a `ValidationTrace`, which measures the validation error, keeps the
best θ and says when to stop (early stopping on the validation rows, as the papers choose their
iteration). The SGD of the metric learners (`knn`, `ncm_metric`) validates through it too.

A fit of thousands of iterations can run for an hour: `watch_validations` lets a caller (the
jobs layer's progress line) see each `Validation` as it is recorded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import NamedTuple

import numpy as np
import scipy.optimize

from imgscale.pipeline.watch import Watch

Objective = Callable[[np.ndarray], tuple[float, np.ndarray]]
"""θ → (loss, ∂loss/∂θ)."""


class Validation(NamedTuple):
    """One validation of an iterative fit: its iteration of at most ``max_iter``, its validation
    error, and the lowest error so far with the iteration that reached it."""

    iteration: int
    max_iter: int
    error: float
    best_error: float
    best_iteration: int


_validations: Watch[Validation] = Watch("validations")


def watch_validations(watcher: Callable[[Validation], None]) -> AbstractContextManager[None]:
    """Call ``watcher`` with every `Validation` an iterative fit records in this context."""
    return _validations.watching(watcher)


class ValidationTrace:
    """Validation history with early stopping: the θ of the lowest validation error is kept.

    ``validation_error(θ)`` measures an iterate; after ``patience`` validations in a row without
    a lower error, `record` says stop (never, with ``patience`` None). ``max_iter`` is the fit's
    last iteration, for the watchers of `watch_validations`.
    """

    def __init__(
        self,
        validation_error: Callable[[np.ndarray], float],
        theta: np.ndarray,
        patience: int | None,
        max_iter: int,
    ):
        self.validation_error, self.patience = validation_error, patience
        self.max_iter = int(max_iter)
        self.iterations: list[int] = []
        self.objective: list[float] = []
        self.errors: list[float] = []
        self.seconds: list[float] = []
        self.started = time.perf_counter()
        self.best_theta, self.best_error, self.best_iteration = theta.copy(), np.inf, 0
        self.iteration, self.stale = 0, 0

    def record(self, iteration: int, theta: np.ndarray, loss: float) -> bool:
        """Validate θ; True when the error has not improved in `patience` validations."""
        error = self.validation_error(theta)
        self.iteration = iteration
        self.iterations.append(iteration)
        self.objective.append(float(loss))
        self.errors.append(error)
        self.seconds.append(time.perf_counter() - self.started)
        if error < self.best_error:
            self.best_theta, self.best_error, self.best_iteration = theta.copy(), error, iteration
            self.stale = 0
        else:
            self.stale += 1
        _validations.report(
            Validation(iteration, self.max_iter, error, self.best_error, self.best_iteration)
        )
        return self.patience is not None and self.stale >= self.patience


def adam(
    gradient: Objective,
    theta: np.ndarray,
    trace: ValidationTrace,
    *,
    learning_rate: float,
    max_iter: int,
    validate_every: int,
    averaging: float = 0.0,
    weight_decay: float = 0.0,
    decayed: Sequence[slice] = (),
    adaptive: bool = False,
) -> None:
    """AdamW (β = 0.9, 0.999; Loshchilov & Hutter, ICLR 2019) from ``theta``, each step on
    ``gradient(θ)`` of a fresh minibatch.

    ``weight_decay`` shrinks the ``decayed`` spans of θ by ``learning_rate × weight_decay`` a
    step; validation sees the exponential moving average of the iterates with decay
    ``averaging`` (bias-corrected; 0 is the last iterate); ``adaptive`` halves the step after
    every two validations in a row without a lower error.
    """
    theta = theta.copy()  # updated in place
    first, second = np.zeros_like(theta), np.zeros_like(theta)
    average, update = np.zeros_like(theta), np.empty_like(theta)
    rate = learning_rate
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    decayed = decayed if weight_decay else ()
    for step in range(1, max_iter + 1):
        loss, grad = gradient(theta)
        first *= beta1
        first += (1 - beta1) * grad
        grad *= grad
        second *= beta2
        second += (1 - beta2) * grad
        # θ −= rate · m̂ / (√v̂ + ε), m̂ and v̂ the bias-corrected moments.
        np.sqrt(second, out=update)
        update *= 1 / np.sqrt(1 - beta2**step)
        update += eps
        np.divide(first, update, out=update)
        update *= rate / (1 - beta1**step)
        theta -= update
        for span in decayed:
            theta[span] *= 1 - rate * weight_decay
        average *= averaging
        average += (1 - averaging) * theta
        if step % validate_every and step != max_iter:
            continue
        if trace.record(step, average / (1 - averaging**step), loss):
            break
        if adaptive and trace.stale and trace.stale % 2 == 0:
            rate /= 2


def lbfgs(
    objective: Objective,
    theta: np.ndarray,
    trace: ValidationTrace,
    *,
    max_iter: int,
    validate_every: int,
) -> None:
    """scipy's L-BFGS-B (20 correction pairs) from ``theta``, validating ``theta`` and then
    every ``validate_every`` iterations."""
    state = {"iteration": 0}

    def callback(intermediate_result: scipy.optimize.OptimizeResult) -> None:
        state["iteration"] += 1
        step = state["iteration"]
        if step % validate_every == 0 or step == max_iter:
            if trace.record(step, intermediate_result.x, float(intermediate_result.fun)):
                raise StopIteration

    trace.record(0, theta, objective(theta)[0])
    scipy.optimize.minimize(
        objective, theta, jac=True, method="L-BFGS-B", callback=callback,
        options={"maxiter": max_iter, "maxcor": 20},
    )  # fmt: skip
