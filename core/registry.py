"""A small typed registry for plug-ins (parsers, encoders, resolvers, judges, reward forms, metrics, interfaces).

One registration idiom serves every kind: ``REGISTRY.register("name", summary=..., needs=(...), **options)`` as a
decorator on a class or a function (or called on one: ``REGISTRY.register(...)(obj)``), and
``REGISTRY.add_lazy("name", "module:object", ...)`` with the same keywords for an entry whose module is heavy (it
is imported on first use, so listing the plug-ins imports nothing heavy and a plug-in whose optional dependency is
missing fails only when it is used).

Entries describe themselves, so callers never compare plug-in names: each entry has a one-line summary, a set of
*needs* (what it needs from its caller: a judge a ``url``, a resolver an ``encoder``, an interface ``generation``
or ``attention``) and the *options* its kind defines (a metric's ``higher_is_better``, a reward form's
``weights``); callers ask ``REGISTRY.needs(name, "url")`` and ``REGISTRY.option(name, "weights")``.

Every kind declares a ``base`` protocol (a ``typing.Protocol``), which the registry checks with an error naming the
entry and what it lacks:

* a protocol with members (a parser's ``name``/``version``/``parse``): the entry is a class (or a factory) whose
  instances have them; a class's methods are checked when it is registered (or first loaded, when lazy), every
  member on what :meth:`Registry.create` builds (or what a caller hands to :meth:`Registry.check`);
* a protocol with only ``__call__`` (a metric is ``fn(result)``): the entry is the function itself, and its
  signature must accept the protocol's arguments, plus one per need that adds an argument (``arguments``: a
  resolver that needs ``context`` is also given ``context=``), when it is registered or first loaded.

Adding a plug-in is one new module plus one registration line (CONTRIBUTING.md); ``python -m quotecite plugins``
lists every registry.

>>> r = Registry[int]("parser", needs=("pdf", "url"))
>>> _ = r.register("pdftext", summary="the PDF text layer", needs=("pdf",))(lambda: 1)
>>> r.needs("pdftext", "pdf"), r.needs("pdftext", "url")
(True, False)
>>> r.get("pdftxt")
Traceback (most recent call last):
...
core.registry.UnknownNameError: unknown parser 'pdftxt'; did you mean 'pdftext'? (known: pdftext)
>>> r.needs("pdftext", "colour")
Traceback (most recent call last):
...
ValueError: parser needs: unknown need 'colour' (known: pdf, url)
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from core.errors import InputError

T = TypeVar("T")

REQUIRED: Any = type("Required", (), {"__repr__": lambda self: "REQUIRED"})()
"""The default of an option every registration line of the kind must give."""


class UnknownNameError(InputError, KeyError):
    """A name that is not registered: bad input (the command lines print it as one line) and, for callers that look
    names up like a mapping, a ``KeyError``. ``str()`` is the message itself (a plain ``KeyError`` quotes it)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class PluginShapeError(TypeError):
    """A registered entry that does not have what its kind's protocol asks for (a programming error of the
    plug-in, not bad input): the message names the kind, the entry and what is missing."""


@dataclass
class Entry:
    """One registered plug-in. ``target``: the class or function, or ``"module:object"`` until first use."""

    name: str
    target: Callable | str
    summary: str = ""
    needs: frozenset[str] = field(default_factory=frozenset)
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def loaded(self) -> bool:
        return not isinstance(self.target, str)


class Registry(Generic[T]):
    """Maps names to plug-ins. ``get`` on an unknown name raises :class:`UnknownNameError` (a ``KeyError``) with a
    did-you-mean hint.

    Args:
        kind: what is registered, for messages ("judge", "resolver").
        base: the kind's protocol (module docstring), or None (nothing is checked).
        needs: every need an entry of this kind may declare (a typo in an entry or in a caller's question is an
            error); None: whatever the entries declare.
        options: the options a registration line may give, with their defaults (:data:`REQUIRED`: it must give
            it); an option not named here is an error.
        arguments: for a call protocol, the argument a need adds to the call: a keyword name, or None for one
            more positional argument.
    """

    def __init__(
        self,
        kind: str,
        base: type | None = None,
        needs: Iterable[str] | None = None,
        options: Mapping[str, Any] | None = None,
        arguments: Mapping[str, str | None] | None = None,
    ) -> None:
        self.kind = kind
        self.base = base
        self.vocabulary = None if needs is None else frozenset(needs)
        self.defaults = dict(options or {})
        self.arguments = dict(arguments or {})
        self._items: dict[str, Entry] = {}

    # ----------------------------------------------------------------------------------------- registering
    def register(self, name: str, *, summary: str = "", needs: Iterable[str] = (), **options) -> Callable[[T], T]:
        """Decorator: register ``obj`` (a class or a function; what the kind's protocol says) under ``name``;
        returns ``obj`` unchanged."""

        def deco(obj: T) -> T:
            entry = Entry(name, obj, summary or first_sentence(obj), frozenset(needs), self._options(name, options))
            self._check_shape(entry, obj)
            self._add(entry)
            return obj

        return deco

    def add_lazy(self, name: str, target: str, *, summary: str = "", needs: Iterable[str] = (), **options) -> None:
        """Register ``"module:object"`` without importing it (checked like :meth:`register` on first use)."""
        if ":" not in target:
            raise ValueError(f"{self.kind} {name!r}: lazy target must be 'module:object', got {target!r}")
        self._add(Entry(name, target, summary, frozenset(needs), self._options(name, options)))

    def _options(self, name: str, given: Mapping[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(given) - set(self.defaults))
        if unknown:
            known = ", ".join(sorted(self.defaults)) or "none"
            raise TypeError(f"{self.kind} {name!r}: unknown option {unknown[0]!r} (a {self.kind} takes: {known})")
        out = {**self.defaults, **given}
        missing = sorted(k for k, v in out.items() if v is REQUIRED)
        if missing:
            raise TypeError(f"{self.kind} {name!r}: the registration must give {', '.join(missing)}")
        return out

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

    # ----------------------------------------------------------------------------------------- checking
    def _check_shape(self, entry: Entry, obj) -> None:
        """What can be checked before anything is built: a call protocol's signature, a class's methods."""
        if self.base is None:
            return
        if _is_call_protocol(self.base):
            problem = _signature_problem(obj, self.base, self._call_arguments(entry))
            if problem:
                raise PluginShapeError(f"{self.kind} {entry.name!r}: {problem}")
        elif inspect.isclass(obj):
            missing = [m for m in _protocol_methods(self.base) if not callable(getattr(obj, m, None))]
            if missing:
                raise PluginShapeError(
                    f"{self.kind} {entry.name!r}: class {obj.__name__} is not a {self.base.__name__} "
                    f"(missing: {', '.join(missing)})"
                )

    def _call_arguments(self, entry: Entry) -> tuple[int, list[str]]:
        """Extra (positional count, keyword names) the entry's needs add to the call protocol's arguments."""
        extra = [self.arguments[n] for n in sorted(entry.needs) if n in self.arguments]
        return sum(a is None for a in extra), [a for a in extra if a is not None]

    def check(self, name: str, obj: T) -> T:
        """``obj`` (what entry ``name`` built) if it has every member of the kind's protocol, else
        :class:`PluginShapeError` naming the entry and the missing members."""
        if self.base is not None and not _is_call_protocol(self.base):
            missing = _missing_members(obj, self.base)
            if missing:
                raise PluginShapeError(
                    f"{self.kind} {name!r} made a {type(obj).__name__}, which is not a {self.base.__name__} "
                    f"(missing: {', '.join(missing)})"
                )
        return obj

    # ----------------------------------------------------------------------------------------- looking up
    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._items)

    def in_order(self) -> list[str]:
        """The registered names in registration order (the order of a report's columns)."""
        return list(self._items)

    def entry(self, name: str) -> Entry:
        try:
            return self._items[name]
        except KeyError:
            close = difflib.get_close_matches(str(name), self._items, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise UnknownNameError(f"unknown {self.kind} {name!r}{hint} (known: {', '.join(self.names())})") from None

    def get(self, name: str) -> Callable[..., T]:
        """The registered class or function ``name`` (a lazy one is imported and checked now)."""
        entry = self.entry(name)
        if isinstance(entry.target, str):
            module, _, attr = entry.target.partition(":")
            try:
                obj = getattr(importlib.import_module(module), attr)
            except ImportError as e:
                raise InputError(f"{self.kind} {name!r} cannot be loaded: {e}") from None
            except AttributeError:
                raise ValueError(f"{self.kind} {name!r}: {entry.target} does not exist") from None
            self._check_shape(entry, obj)
            entry.target = obj
            if not entry.summary:
                entry.summary = first_sentence(obj)
        return entry.target

    def create(self, name: str, **kwargs) -> T:
        """Build plug-in ``name`` from its class or factory and :meth:`check` what it made."""
        return self.check(name, self.get(name)(**kwargs))

    def option(self, name: str, option: str):
        """The value of ``option`` on entry ``name`` (its kind's default when the registration line left it out)."""
        entry = self.entry(name)
        if option not in self.defaults:
            raise ValueError(f"{self.kind} options: unknown option {option!r} (known: {', '.join(self.defaults)})")
        return entry.options[option]

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


# --------------------------------------------------------------------------------------------- protocol checks
def _is_call_protocol(base: type) -> bool:
    """A protocol whose one member is ``__call__``: its entries are functions."""
    return "__call__" in vars(base) and not _protocol_methods(base) and not getattr(base, "__annotations__", {})


def _protocol_methods(base: type) -> list[str]:
    return [n for n, v in vars(base).items() if callable(v) and not n.startswith("_")]


def _missing_members(obj, base: type) -> list[str]:
    """Members of ``base`` that ``obj`` lacks. A protocol's members (annotated attributes and public methods) are
    looked up without reading them: ``isinstance`` against a runtime protocol would evaluate properties (an
    encoder's ``dim`` may ask its server)."""
    if not getattr(base, "_is_protocol", False):
        return [] if isinstance(obj, base) else [base.__name__]
    members = [*getattr(base, "__annotations__", {}), *_protocol_methods(base)]
    own = getattr(obj, "__dict__", {})
    return [n for n in members if n not in own and not hasattr(type(obj), n)]


def _signature_problem(fn, base: type, extra: tuple[int, list[str]]) -> str | None:
    """Why ``fn`` cannot be called the way ``base.__call__`` says (its required arguments, plus ``extra``:
    positional count and keyword names the entry's needs add), or None."""
    if not callable(fn):
        return f"{fn!r} is not callable (a {base.__name__} is a function)"
    params = list(inspect.signature(base.__call__).parameters.values())[1:]  # without self
    required = [p.name for p in params if p.default is inspect.Parameter.empty and p.kind <= p.POSITIONAL_OR_KEYWORD]
    n_extra, keywords = extra
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # a builtin without a signature: nothing to check
    try:
        sig.bind(*required, *range(n_extra), **dict.fromkeys(keywords))
    except TypeError as e:
        wanted = ", ".join([*required, *(["..."] * n_extra), *(f"{k}=" for k in keywords)])
        name = getattr(fn, "__name__", type(fn).__name__)
        return f"{name}{sig} cannot be called as a {base.__name__}({wanted}): {e}"
    return None


def first_sentence(obj) -> str:
    """The first paragraph of ``obj``'s docstring on one line, without reST markup (the listing shows it)."""
    doc = inspect.cleandoc(getattr(obj, "__doc__", None) or "")
    doc = " ".join(doc.split("\n\n")[0].split())
    return re.sub(r":\w+:`([^`]*)`|``([^`]*)``", lambda m: m.group(1) or m.group(2), doc)
