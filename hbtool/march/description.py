"""Reads a march's hardware description file (``<march>.yaml`` beside this module).

Values in the file are either plain numbers or ``{value, kind, source}`` records; ``March.param``
returns the number either way, so the cost model and checker do not care which.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from hbtool.errors import InputError

_HERE = Path(__file__).parent
# Horizon's march names; each has its description file ``<march>.yaml`` beside this module.
SUPPORTED_MARCHES = ("bayes", "bayes-e", "bernoulli2")
MARCH_CHIPS = {"bayes": "Journey 5 / RDK Ultra", "bayes-e": "RDK X5", "bernoulli2": "RDK X3 / Journey 3"}


@dataclass(frozen=True)
class March:
    name: str
    raw: dict[str, Any] = field(repr=False)

    def param(self, dotted: str) -> Any:
        """The value at ``a.b.c``; ``{value: ...}`` records give their value."""
        node: Any = self.raw
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                raise KeyError(f"march '{self.name}' has no parameter '{dotted}'")
            node = node[part]
        if isinstance(node, dict) and "value" in node:
            return node["value"]
        return node

    def limit(self, key: str) -> int:
        return int(self.raw["limits"][key])

    @property
    def limits(self) -> dict[str, Any]:
        return dict(self.raw.get("limits", {}))

    def alignment(self, unit: str) -> dict[str, int]:
        return dict(self.raw["units"][unit].get("alignment", {}))


@lru_cache(maxsize=None)
def load_march(name: str) -> March:
    """Load a march by name, or say which ones exist."""
    if name not in SUPPORTED_MARCHES:
        known = ", ".join(f"{m} ({MARCH_CHIPS[m]})" for m in SUPPORTED_MARCHES)
        raise InputError(f"march '{name}' is not supported", f"use one of: {known}")
    with open(_HERE / f"{name}.yaml", encoding="utf-8") as fh:
        raw = yaml.safe_load(fh)
    return March(name, raw)
