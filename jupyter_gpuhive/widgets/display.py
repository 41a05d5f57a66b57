"""Shown: views display as their top widget when returned from a notebook cell; Observed: a
model whose views listen to its changes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ipywidgets as w


class Shown:
    """Mixin: a view object with a `widget` shows that widget."""

    widget: w.Widget

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)


class Observed:
    """Mixin: a model that calls its `listeners` (its views' render) after each change."""

    listeners: list[Callable[[], None]]

    def _changed(self) -> None:
        for listener in self.listeners:
            listener()
