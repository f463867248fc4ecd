"""A small typed registry for plug-ins (parsers, encoders, resolvers, judges, reward forms)."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to factories. ``get`` on an unknown name raises ``KeyError`` with a did-you-mean hint.

    >>> r = Registry[int]("parser")
    >>> _ = r.register("pdftext")(lambda: 1)
    >>> r.get("pdftxt")
    Traceback (most recent call last):
    ...
    KeyError: "unknown parser 'pdftxt'; did you mean 'pdftext'? (known: pdftext)"
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, Callable[..., T]] = {}

    def register(self, name: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
        def deco(factory: Callable[..., T]) -> Callable[..., T]:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._items[name] = factory
            return factory

        return deco

    def names(self) -> list[str]:
        return sorted(self._items)

    def get(self, name: str) -> Callable[..., T]:
        try:
            return self._items[name]
        except KeyError:
            close = difflib.get_close_matches(name, self._items, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise KeyError(f"unknown {self.kind} {name!r}{hint} (known: {', '.join(self.names())})") from None

    def create(self, name: str, **kwargs) -> T:
        return self.get(name)(**kwargs)

    def __contains__(self, name: str) -> bool:
        return name in self._items
