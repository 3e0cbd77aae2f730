"""What every integration's item builder shares: nested values flattened one slot per leaf."""

from __future__ import annotations

from typing import Any, List


class ItemsBase:
    """Builds one op's dump items; a framework's subclass gives `item(value)` (one tensor's
    item, or None for a value that is not one) and `stream()`."""

    __slots__ = ()

    def item(self, value: Any, linked: Any = None) -> Any:
        raise NotImplementedError

    def flatten(self, value: Any, out: List[Any]) -> None:
        """Appends the dump items of `value` (tensor, or nested tuple/list/dict of them)."""
        if isinstance(value, (tuple, list)):
            for v in value:
                self.flatten(v, out)
        elif isinstance(value, dict):
            for v in value.values():
                self.flatten(v, out)
        else:
            out.append(self.item(value))

    def of(self, value: Any) -> List[Any]:
        out: List[Any] = []
        self.flatten(value, out)
        return out

    def of_linked(self, values: List[Any], linked: List[Any]) -> List[Any]:
        """The items of a traced graph's flat list of tensors, each with its identity."""
        return [self.item(v, i) for v, i in zip(values, linked)]

    def stream(self) -> Any:
        """The device stream the op's copies are enqueued on (None: host tensors only)."""
        return None
