"""The bottom layer: the parts every stage (``data_prep``, ``reward``, ``eval``, ``quotecite``) and ``launch/``
share, and nothing else. It imports no other package of the project.

* :mod:`core.errors`: the error types (``QuoteciteError``, ``InputError``) the command lines print as one line;
* :mod:`core.registry`: the one plug-in registry class of the seven registries, with its protocol checks;
* :mod:`core.cli`: the sub-command dispatcher of ``python -m data_prep|reward|eval``;
* :mod:`core.io`: atomic writes, the one JSON/JSONL/YAML readers, refusals of special files;
* :mod:`core.geometry`: the box type, the one IoU and the rule for a parser's box on its page.
"""
