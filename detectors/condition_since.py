"""When each node's configuration fault began, for the findings about configurations.

A configuration finding is one finding per node and fault: the same pool gap or engine version
over a node's restarts is one, not one per restart. But a fault that was mended and then came
back (a rollback to an unsafe engine, a pool raised and lowered again) is a new one, and must
page again: its finding's subject names the generation (`collector.state.config_timeline`) in
which the fault, as it now stands, began.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any


class ConditionSince:
    """Per node: the fault in force and the generation it began in."""

    def __init__(self) -> None:
        self._since: dict[str, tuple[Any, int]] = {}

    def began(self, node: str, condition: tuple[Hashable, ...], generation: int) -> int:
        """The generation `condition` began in on `node`: this one, unless the node has been in
        it since an earlier one without a break."""
        held = self._since.get(node)
        if held is None or held[0] != condition:
            held = self._since[node] = (condition, generation)
        return held[1]

    def mended(self, node: str) -> None:
        """The node is free of the fault: a later one begins afresh."""
        self._since.pop(node, None)

    def to_state(self) -> dict[str, list[Any]]:
        return {node: [list(condition), since] for node, (condition, since) in self._since.items()}

    @classmethod
    def from_state(cls, state: object) -> ConditionSince:
        loaded = cls()
        if isinstance(state, dict):
            for node, held in state.items():
                if isinstance(held, list) and len(held) == 2 and isinstance(held[1], int):
                    loaded._since[str(node)] = (tuple(held[0]), held[1])
        return loaded
