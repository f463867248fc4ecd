"""The interface registry: how a model shows its evidence (language, coordinate, LAT, attention). Rendering the
interfaces side by side is :func:`eval.tables.interfaces_table`."""

from __future__ import annotations

from dataclasses import dataclass

from data_prep.registry import Registry


@dataclass(frozen=True)
class Interface:
    """How a model shows its evidence: what ``eval infer`` reads as the answer of a response
    (``answer_of``: ``"module:function"``, text -> answer; None: no generated text) and how ``eval resolve`` turns a
    prediction into citations (``cites_by``: ``quotes`` resolved to blocks, ``boxes`` snapped to blocks, ``steps``
    of a Chain-of-Evidence, or ``citations`` already made by the interface)."""

    name: str
    answer_of: str | None
    cites_by: str

    def answer(self, text: str) -> str:
        if self.answer_of is None:
            raise ValueError(f"interface {self.name!r} produces no text to read an answer from")
        import importlib

        module, _, attr = self.answer_of.partition(":")
        return getattr(importlib.import_module(module), attr)(text)


INTERFACES: Registry[Interface] = Registry("interface", needs=("generation", "attention"))
"""The interfaces; ``needs``: ``generation`` (vLLM generates the response) or ``attention`` (read off the prefill
attention, no generation)."""


def _interface(name: str, answer_of: str | None, cites_by: str, summary: str, needs: tuple[str, ...]) -> None:
    iface = Interface(name, answer_of, cites_by)
    INTERFACES.register(name, summary=summary, needs=needs)(lambda: iface)


_interface(
    "language",
    "eval.interfaces:_quotes_answer",
    "quotes",
    "answer + verbatim quotes, resolved to layout blocks (ours, paper J.2)",
    ("generation",),
)
_interface(
    "coordinate",
    "eval.interfaces:_coordinate_answer",
    "boxes",
    "answer + boxes in page coordinates (CiteVQA's, paper J.1)",
    ("generation",),
)
_interface(
    "lat",
    "eval.interfaces:_lat_answer",
    "steps",
    "LAT's Chain-of-Evidence: steps with box and page, then the answer",
    ("generation",),
)
_interface("attention", None, "citations",
           "MultAttnAttrib: blocks read off the prefill attention of the same VLM", ("attention",))  # fmt: skip


def get_interface(name: str) -> Interface:
    return INTERFACES.create(name)


def _quotes_answer(text: str) -> str:
    from reward.response import parse_response

    return parse_response(text).answer


def _coordinate_answer(text: str) -> str:
    from eval.coordinate import parse_coordinate_response

    return parse_coordinate_response(text).answer


def _lat_answer(text: str) -> str:
    from reward.lat import parse_coe

    return parse_coe(text).answer
