"""Shown: views display as their top widget when returned from a notebook cell."""

from __future__ import annotations

from typing import Any

import ipywidgets as w


class Shown:
    """Mixin: a view object with a `widget` shows that widget."""

    widget: w.Widget

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)
