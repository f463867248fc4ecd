"""Import-only stand-in for ``vllm.distributed`` (see ``vllm/__init__.py`` of this stand-in)."""

from . import parallel_state  # noqa: F401
