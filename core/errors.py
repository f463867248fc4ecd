"""The project's error types, in the bottom layer (:mod:`core`) so that every stage and ``launch/`` can use them.

The command lines (:func:`core.cli.main`) print an error of these types as one line ``error: ...`` and exit 2;
every other exception is a bug and keeps its traceback. So raise one of these only for a failure the user can fix
(bad input, a server that is down, a missing tool), with a message that names what is wrong:

* :class:`QuoteciteError`: the base; subclass it for failures that are not bad input (a server outage, a missing
  environment).
* :class:`InputError` (a ``QuoteciteError`` and a ``ValueError``): bad input from the user, a file,
  a flag, a setting. Most errors are this one or a subclass of it.
* :class:`core.registry.UnknownNameError` (an ``InputError`` and a ``KeyError``): a plug-in name that is not
  registered, with a did-you-mean.

>>> issubclass(InputError, QuoteciteError) and issubclass(InputError, ValueError)
True
"""

from __future__ import annotations


class QuoteciteError(Exception):
    """An expected failure the user can act on; the message says what is wrong and where (one line)."""


class InputError(QuoteciteError, ValueError):
    """Bad input from the user (a file, a parser output, a cache directory). The message names the input."""
