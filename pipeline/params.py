"""Constructor parameters' constraints, declared once per estimator and checked in one place.

An estimator lists, in ``_parameter_rules``, the values each parameter may take: any of an
`Interval`, an `Options` set of strings, or ``None``. `check_params` runs when ``fit`` first
checks its input (the row mixins call it), so every estimator refuses a bad parameter the same
way: one line, ``"{name} must be {what}, got {value!r}"``, before any row is read.
(scikit-learn's ``_parameter_constraints`` serves the same purpose; its checker is private.)
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

Rule = Any
"""An `Interval`, an `Options`, an `Each`, or None (the parameter may be None)."""


@dataclass(frozen=True)
class Interval:
    """Numbers of ``kind`` (int or float) between ``low`` and ``high`` (None: unbounded), each
    end included or not as ``closed`` says ("both", "left", "right", "neither"). Floats must be
    finite."""

    kind: type
    low: float | None
    high: float | None
    closed: str = "both"

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool):
            return False
        if self.kind is int:
            if not isinstance(value, numbers.Integral):
                return False
        elif not isinstance(value, numbers.Real) or not math.isfinite(value):
            return False
        low_in = self.closed in ("both", "left")
        high_in = self.closed in ("both", "right")
        if self.low is not None and not (value >= self.low if low_in else value > self.low):
            return False
        return self.high is None or (value <= self.high if high_in else value < self.high)

    def describe(self) -> str:
        low_in = self.closed in ("both", "left")
        high_in = self.closed in ("both", "right")
        finite = " and finite" if self.kind is float and self.high is None else ""
        if self.kind is int and self.low == 1 and low_in and self.high is None:
            return "positive"
        if self.high is None and self.low == 0:
            return ("non-negative" if low_in else "positive") + finite
        if self.high is None:
            return (f"at least {self.low}" if low_in else f"greater than {self.low}") + finite
        if self.low is None:
            return f"at most {self.high}" if high_in else f"less than {self.high}"
        return f"in {'[' if low_in else '('}{self.low}, {self.high}{']' if high_in else ')'}"


@dataclass(frozen=True)
class Options:
    """One of the given strings."""

    values: tuple[str, ...]

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str) and value in self.values

    def describe(self) -> str:
        return f"one of {', '.join(self.values)}"


@dataclass(frozen=True)
class Each:
    """A non-empty sequence whose every item ``rule`` accepts."""

    rule: Interval

    def accepts(self, value: Any) -> bool:
        if isinstance(value, str) or not hasattr(value, "__len__") or len(value) == 0:
            return False
        return all(self.rule.accepts(item) for item in value)

    def describe(self) -> str:
        return f"a non-empty sequence of values each {self.rule.describe()}"


def _accepts(rule: Rule, value: Any) -> bool:
    return value is None if rule is None else rule.accepts(value)


def _describe(rule: Rule) -> str:
    return "None" if rule is None else rule.describe()


class ParameterError(ValueError):
    """A constructor parameter none of its rules accepts; ``parameter`` is its name, so a caller
    that set it from an option of its own (a command-line flag) can say so by that name."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


def check_params(estimator: Any) -> None:
    """ParameterError naming the first parameter of ``estimator`` that none of its rules
    accepts."""
    for name, rules in getattr(type(estimator), "_parameter_rules", {}).items():
        value = getattr(estimator, name)
        if not any(_accepts(rule, value) for rule in rules):
            what = " or ".join(_describe(rule) for rule in rules)
            choice = isinstance(value, str) and any(isinstance(r, Options) for r in rules)
            unknown = f", an unknown {name}" if choice else ""
            raise ParameterError(name, f"{name} must be {what}, got {value!r}{unknown}")
