"""One JSON helper for the project: numpy values to plain JSON types."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["jsonable"]


def jsonable(obj: Any) -> Any:
    """``obj`` with numpy scalars and arrays turned into Python ones, recursively.

    Dict keys become strings, tuples lists; NaN and infinities become ``None``
    (JSON has neither); anything else that JSON cannot hold (a callable, a
    generator) becomes ``None`` too, so that a result or a model's parameters can
    always be written.
    """
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    return None
