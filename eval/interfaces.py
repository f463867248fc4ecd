"""The interface registry: how a model shows its evidence (language, coordinate, LAT, attention). Rendering the
interfaces side by side is :func:`eval.tables.interfaces_table`.

An interface is a class registered with ``@INTERFACES.register("name", summary=..., needs=(...))``; it reads the
answer of a response (:meth:`Interface.answer`) and turns a prediction into its citations
(:meth:`Interface.cite`, given the ``eval resolve`` resolver, which does the work for the built-in ones). Its needs
tell the callers what it needs from them, so none compares an interface's name:

* ``generation``: ``eval infer`` generates its responses with vLLM; ``attention``: ``eval infer`` reads its
  citations off the prefill attention instead (:mod:`eval.attention`, no generation);
* ``quotes``: its responses quote the document verbatim (the reward's parser reads them; MultAttrEval takes the
  quotes as the cited spans);
* ``citevqa_prompt``: ``eval infer`` prompts it with CiteVQA's inference prompt (``--citevqa-dir``) unless
  ``--coordinate-prompt ours``.
"""

from __future__ import annotations

from typing import Protocol

from core.registry import Registry


class Interface(Protocol):
    """What an interface provides (the registry checks these members when it builds one)."""

    def answer(self, text: str) -> str:
        """The answer of a generated response ``text`` (``ValueError`` when the interface generates no text)."""

    def cite(self, resolver, gold, pred, cached) -> dict:
        """The resolved record of prediction ``pred`` (:class:`~eval.schemas.Prediction`) for question ``gold``
        over the cached document ``cached``; ``resolver`` is ``eval resolve``'s
        :class:`~eval.cmd_resolve.Resolver` (its ``resolve_*`` methods and ``record``)."""


INTERFACES: Registry[Interface] = Registry(
    "interface", base=Interface, needs=("generation", "attention", "quotes", "citevqa_prompt")
)
"""The interfaces; needs: the module docstring."""

DEFAULT_INTERFACE = "language"
"""The interface of a prediction that names none."""


def get_interface(name: str | None) -> Interface:
    """The interface ``name`` (None: :data:`DEFAULT_INTERFACE`)."""
    return INTERFACES.create(DEFAULT_INTERFACE if name is None else name)


@INTERFACES.register(
    "language", summary="answer + verbatim quotes, resolved to layout blocks (ours, paper J.2)",
    needs=("generation", "quotes"),
)  # fmt: skip
class LanguageInterface:
    def answer(self, text: str) -> str:
        from reward.response import parse_response

        return parse_response(text).answer

    def cite(self, resolver, gold, pred, cached) -> dict:
        return resolver.resolve_quotes(gold, pred, cached)


@INTERFACES.register(
    "coordinate", summary="answer + boxes in page coordinates (CiteVQA's, paper J.1)",
    needs=("generation", "citevqa_prompt"),
)  # fmt: skip
class CoordinateInterface:
    def answer(self, text: str) -> str:
        from eval.coordinate import parse_coordinate_response

        return parse_coordinate_response(text).answer

    def cite(self, resolver, gold, pred, cached) -> dict:
        return resolver.resolve_boxes(gold, pred, cached)


@INTERFACES.register(
    "lat", summary="LAT's Chain-of-Evidence: steps with box and page, then the answer", needs=("generation",)
)
class LatInterface:
    def answer(self, text: str) -> str:
        from reward.lat import parse_coe

        return parse_coe(text).answer

    def cite(self, resolver, gold, pred, cached) -> dict:
        return resolver.resolve_steps(gold, pred, cached)


@INTERFACES.register(
    "attention", summary="MultAttnAttrib: blocks read off the prefill attention of the same VLM", needs=("attention",)
)
class AttentionInterface:
    def answer(self, text: str) -> str:
        raise ValueError("interface 'attention' produces no text to read an answer from")

    def cite(self, resolver, gold, pred, cached) -> dict:
        return resolver.keep_citations(gold, pred, cached)
