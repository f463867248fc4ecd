"""A small typed registry for plug-ins (parsers, encoders, resolvers, judges, reward forms, metrics, interfaces).

Entries describe themselves, so callers never compare plug-in names: each entry has a one-line summary and a set
of *needs* (what it needs from its caller: a judge that ``url`` and ``crops``, a resolver that ``encoder``, an
encoder that ``url`` for a remote server), and callers ask ``REGISTRY.needs(name, "url")``. An entry is either a
factory registered with the decorator, or a lazy ``"module:object"`` string imported on first use (so listing the
plug-ins imports nothing heavy, and a plug-in whose optional dependency is missing fails only when it is used).
A registry with a ``base`` checks what its factories make.

Adding a plug-in is one new module plus one registration line (CONTRIBUTING.md); ``python -m quotecite plugins``
lists every registry.

>>> r = Registry[int]("parser", needs=("pdf", "url"))
>>> _ = r.register("pdftext", summary="the PDF text layer", needs=("pdf",))(lambda: 1)
>>> r.needs("pdftext", "pdf"), r.needs("pdftext", "url")
(True, False)
>>> r.get("pdftxt")
Traceback (most recent call last):
...
data_prep.registry.UnknownNameError: unknown parser 'pdftxt'; did you mean 'pdftext'? (known: pdftext)
>>> r.needs("pdftext", "colour")
Traceback (most recent call last):
...
ValueError: parser needs: unknown need 'colour' (known: pdf, url)
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from data_prep.types import InputError

T = TypeVar("T")


class UnknownNameError(InputError, KeyError):
    """A name that is not registered: bad input (the command lines print it as one line) and, for callers that look
    names up like a mapping, a ``KeyError``. ``str()`` is the message itself (a plain ``KeyError`` quotes it)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass
class Entry:
    """One registered plug-in. ``target``: the factory, or ``"module:object"`` until first use."""

    name: str
    target: Callable | str
    summary: str = ""
    needs: frozenset[str] = field(default_factory=frozenset)

    @property
    def loaded(self) -> bool:
        return not isinstance(self.target, str)


class Registry(Generic[T]):
    """Maps names to factories. ``get`` on an unknown name raises :class:`UnknownNameError` (a ``KeyError``) with a
    did-you-mean hint.

    Args:
        kind: what is registered, for messages ("judge", "resolver").
        base: a class every class entry must subclass (checked when a lazy entry is loaded), or None.
        needs: every need an entry of this kind may declare (a typo in an entry or in a caller's question is an
            error); None: whatever the entries declare.
    """

    def __init__(self, kind: str, base: type | None = None, needs: Iterable[str] | None = None) -> None:
        self.kind = kind
        self.base = base
        self.vocabulary = None if needs is None else frozenset(needs)
        self._items: dict[str, Entry] = {}

    # ----------------------------------------------------------------------------------------- registering
    def register(
        self, name: str, *, summary: str = "", needs: Iterable[str] = ()
    ) -> Callable[[Callable[..., T]], Callable[..., T]]:
        """Decorator: register ``factory`` (a class or a function returning the plug-in) under ``name``."""

        def deco(factory: Callable[..., T]) -> Callable[..., T]:
            self._add(Entry(name, factory, summary or _first_line(factory), frozenset(needs)))
            return factory

        return deco

    def add_lazy(self, name: str, target: str, *, summary: str = "", needs: Iterable[str] = ()) -> None:
        """Register ``"module:object"`` without importing it."""
        if ":" not in target:
            raise ValueError(f"{self.kind} {name!r}: lazy target must be 'module:object', got {target!r}")
        self._add(Entry(name, target, summary, frozenset(needs)))

    def _add(self, entry: Entry) -> None:
        if self.vocabulary is not None and not entry.needs <= self.vocabulary:
            bad = ", ".join(sorted(entry.needs - self.vocabulary))
            raise ValueError(
                f"{self.kind} {entry.name!r}: unknown need {bad} (known: {', '.join(sorted(self.vocabulary))})"
            )
        if entry.name in self._items:
            raise ValueError(f"{self.kind} {entry.name!r} is registered twice")
        self._items[entry.name] = entry

    def unregister(self, name: str) -> None:
        """Remove ``name`` (tests that register a throwaway plug-in clean up with it)."""
        self._items.pop(name, None)

    # ----------------------------------------------------------------------------------------- looking up
    def names(self) -> list[str]:
        return sorted(self._items)

    def entry(self, name: str) -> Entry:
        try:
            return self._items[name]
        except KeyError:
            close = difflib.get_close_matches(str(name), self._items, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise UnknownNameError(f"unknown {self.kind} {name!r}{hint} (known: {', '.join(self.names())})") from None

    def get(self, name: str) -> Callable[..., T]:
        entry = self.entry(name)
        if isinstance(entry.target, str):
            module, _, attr = entry.target.partition(":")
            try:
                obj = getattr(importlib.import_module(module), attr)
            except ImportError as e:
                raise InputError(f"{self.kind} {name!r} cannot be loaded: {e}") from None
            except AttributeError:
                raise ValueError(f"{self.kind} {name!r}: {entry.target} does not exist") from None
            entry.target = obj
            if not entry.summary:
                entry.summary = _first_line(obj)
        return entry.target

    def create(self, name: str, **kwargs) -> T:
        """Build plug-in ``name``; with a ``base`` (a class, or a ``runtime_checkable`` protocol), what the factory
        made must be an instance of it."""
        obj = self.get(name)(**kwargs)
        if self.base is not None:
            missing = _missing_members(obj, self.base)
            if missing:
                raise TypeError(
                    f"{self.kind} {name!r} made a {type(obj).__name__}, which is not a {self.base.__name__} "
                    f"(missing: {', '.join(missing)})"
                )
        return obj

    def needs(self, name: str, what: str) -> bool:
        """Whether plug-in ``name`` needs ``what`` from its caller (a need no entry declares is a typo: it
        raises ``ValueError``)."""
        entry = self.entry(name)
        known = (
            self.vocabulary if self.vocabulary is not None else set().union(*(e.needs for e in self._items.values()))
        )
        if what not in known:
            raise ValueError(f"{self.kind} needs: unknown need {what!r} (known: {', '.join(sorted(known)) or '-'})")
        return what in entry.needs

    def with_need(self, what: str) -> list[str]:
        """The names whose entries need ``what``."""
        return [n for n in self.names() if what in self._items[n].needs]

    def describe(self) -> list[dict]:
        """One row per entry (name, summary, needs) for the listing command; imports nothing lazy."""
        return [
            {"name": n, "summary": self._items[n].summary, "needs": sorted(self._items[n].needs)} for n in self.names()
        ]

    def __contains__(self, name: str) -> bool:
        return name in self._items


def _missing_members(obj, base: type) -> list[str]:
    """Members of ``base`` that ``obj`` lacks. A protocol's members (annotated attributes and public methods) are
    looked up without reading them: ``isinstance`` against a runtime protocol would evaluate properties (an
    encoder's ``dim`` may ask its server)."""
    if not getattr(base, "_is_protocol", False):
        return [] if isinstance(obj, base) else [base.__name__]
    members = [*getattr(base, "__annotations__", {})]
    members += [n for n, v in vars(base).items() if callable(v) and not n.startswith("_")]
    own = getattr(obj, "__dict__", {})
    return [n for n in members if n not in own and not hasattr(type(obj), n)]


def _first_line(obj) -> str:
    doc = getattr(obj, "__doc__", None) or ""
    return doc.strip().splitlines()[0].strip() if doc.strip() else ""
