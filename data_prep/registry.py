"""A small typed registry for plug-ins (parsers, encoders, resolvers, judges, reward forms)."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Generic, TypeVar

from data_prep.types import InputError

T = TypeVar("T")


class UnknownNameError(InputError, KeyError):
    """A name that is not registered: bad input (the command lines print it as one line) and, for callers that look
    names up like a mapping, a ``KeyError``. ``str()`` is the message itself (a plain ``KeyError`` quotes it)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class Registry(Generic[T]):
    """Maps names to factories. ``get`` on an unknown name raises :class:`UnknownNameError` (a ``KeyError``) with a
    did-you-mean hint.

    >>> r = Registry[int]("parser")
    >>> _ = r.register("pdftext")(lambda: 1)
    >>> r.get("pdftxt")
    Traceback (most recent call last):
    ...
    data_prep.registry.UnknownNameError: unknown parser 'pdftxt'; did you mean 'pdftext'? (known: pdftext)
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
            raise UnknownNameError(f"unknown {self.kind} {name!r}{hint} (known: {', '.join(self.names())})") from None

    def create(self, name: str, **kwargs) -> T:
        return self.get(name)(**kwargs)

    def __contains__(self, name: str) -> bool:
        return name in self._items
