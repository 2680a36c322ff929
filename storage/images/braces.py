"""Shell-style brace expansion for shard names: ``shards-{0000..0099}.tar`` and ``{a,b}``."""

from __future__ import annotations

import re

_GROUP = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"(-?\d+)\.\.(-?\d+)")


def expand_braces(pattern: str) -> list[str]:
    """Every name ``pattern`` stands for, in order, as a shell expands it: a range
    ``{first..last}`` counts up or down, zero-padded to the wider end when either end has a
    leading zero; a list ``{a,b,c}`` gives each item; several groups give every combination.
    A group that is neither (``{x}``) stays as it is; groups do not nest."""
    for group in _GROUP.finditer(pattern):
        items = _items(group.group(1))
        if items is not None:
            head, tail = pattern[: group.start()], pattern[group.end() :]
            return [head + item + rest for item in items for rest in expand_braces(tail)]
    return [pattern]


def has_braces(pattern: str) -> bool:
    return any(_items(group.group(1)) is not None for group in _GROUP.finditer(pattern))


def _items(body: str) -> list[str] | None:
    bounds = _RANGE.fullmatch(body)
    if bounds:
        first, last = bounds.groups()
        padded = any(
            len(end.lstrip("-")) > 1 and end.lstrip("-")[0] == "0" for end in bounds.groups()
        )
        width = max(len(first), len(last)) if padded else 0
        step = 1 if int(last) >= int(first) else -1
        return [f"{n:0{width}d}" for n in range(int(first), int(last) + step, step)]
    if "," in body:
        return body.split(",")
    return None
