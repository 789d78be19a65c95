"""The model a watcher scores with, and its hot swap.

:class:`ModelSlot` loads the model file (with the loader it is given: ``fedep watch``
passes the one every command uses, which verifies the signature and announces an
unsigned model; by default, verified when a key is given) and builds its
:class:`fedep.alerts.AlertFactory`; :meth:`ModelSlot.check` notices when the file was
replaced (its inode, size or modification time changed), loads the new one and keeps it
only if it loads, verifies and reads columns the followed logs have. A refused model
leaves the running one in place; the reason is returned for the operator, once per
version of the file.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

from fedep._errors import one_line
from fedep.alerts import AlertFactory, model_identity
from fedep.data.errors import DataError
from fedep.modelfile import ModelFileError
from fedep.modelfile.estimator import load_model
from fedep.modelfile.signing import parse_key

__all__ = ["ModelSlot", "missing_columns"]


def missing_columns(factory: AlertFactory, columns: Iterable[str]) -> list[str]:
    """The columns ``factory``'s model needs that ``columns`` lacks."""
    have = set(columns)
    return [c for c in factory.needed_columns if c not in have]


def _signature(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class ModelSlot:
    """The current model of a watcher.

    Parameters
    ----------
    path : str or Path
        The model file (from ``fedep fit``).
    verify_key : str, optional
        As ``--verify-key``: refuse an unsigned or altered model (used by the default
        loader only).
    make_factory : callable
        ``make_factory(det, model_id, model_digest) -> AlertFactory``.
    load : callable, optional
        ``load(path) -> detector``, raising ``ModelFileError`` (one line) when the file
        is refused; it loads the first model and every replacement.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        verify_key: str | None,
        make_factory: Callable[[object, str, str], AlertFactory],
        load: Callable[[Path], object] | None = None,
    ) -> None:
        self.path = Path(path)
        key = parse_key(verify_key)
        self.load = load or (
            lambda p: load_model(p, verify_key=key, require_signature=key is not None)
        )
        self.make_factory = make_factory
        self._seen = _signature(self.path)
        self.factory = self._load()
        self.swaps = 0

    def _load(self) -> AlertFactory:
        """Load the file as it is now (errors: ModelFileError / DataError / ValueError)."""
        before = os.stat(self.path)
        det = self.load(self.path)
        after = _signature(self.path)
        if after is not None and after[:2] != (before.st_dev, before.st_ino):
            raise ModelFileError(f"model file {self.path}: replaced while it was read")
        model_id, digest = model_identity(det)  # as `fedep score` names it
        factory = self.make_factory(det, model_id, digest)
        self.model_id, self.digest = model_id, digest
        return factory

    def check(self, columns: Iterable[str] | None) -> str | None:
        """Swap to the model file's new version, if it was replaced and is accepted.

        Parameters
        ----------
        columns : iterable of str, optional
            The columns of the logs being followed (the new model must need no other).

        Returns
        -------
        str or None
            One line for the operator (``None`` when the file did not change).
        """
        sig = _signature(self.path)
        if sig is None or sig == self._seen:
            return None
        self._seen = sig
        running = (self.model_id, self.digest)
        try:
            factory = self._load()
            lacking = [] if columns is None else missing_columns(factory, columns)
            if lacking:
                raise DataError(
                    self.path, "the logs lack its column(s) " + ", ".join(map(repr, lacking))
                )
        except (ModelFileError, DataError, ValueError, OSError) as exc:
            self.model_id, self.digest = running
            return f"model refused ({one_line(exc)}); still scoring with {running[0]}"
        self.factory = factory
        self.swaps += 1
        return f"model {self.model_id} loaded from {self.path}; it scores from the next batch"
