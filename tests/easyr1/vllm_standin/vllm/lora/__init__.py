"""Import-only stand-in for ``vllm.lora`` (see ``vllm/__init__.py`` of this stand-in)."""
