"""Error messages on one line.

Every message fedep shows a person (the command line's ``fedep: error:`` line, a
:class:`~fedep.modelfile.ModelFileError`, a gateway's refusal) is one line. :func:`one_line`
is the one helper that makes it so, for an exception or for any text quoted in a message.
It sits on the bottom floor, beside :mod:`fedep._atomic`, so that every floor may use it.
"""

from __future__ import annotations

__all__ = ["one_line"]


def one_line(what: object, limit: int | None = None) -> str:
    """``what`` as one line of an error message.

    Parameters
    ----------
    what : object
        An exception or any value. An exception gives its message, or its type's name
        when the message is empty; an :class:`OSError` that names a file gives
        ``file: reason``. Any other value gives ``str(what)``.
    limit : int, optional
        The longest result: a longer line is cut and ends with ``...``.

    Returns
    -------
    str
        The text with every run of whitespace (newlines included) made one space.
    """
    if isinstance(what, BaseException):
        text = str(what).strip() or type(what).__name__
        if isinstance(what, OSError) and what.strerror and what.filename is not None:
            text = f"{what.filename}: {what.strerror}"
    else:
        text = str(what)
    text = " ".join(text.split())
    if limit is not None and len(text) > limit:
        text = text[: limit - 3] + "..."
    return text
