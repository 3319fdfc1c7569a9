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
    board: str = ""

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

    @property
    def int16_classes(self) -> tuple[str, ...]:
        """Op classes that compute in int16 on this march (``int16.supported``); empty: int8 only."""
        return tuple((self.raw.get("int16") or {}).get("supported") or ())

    @property
    def has_int16(self) -> bool:
        return bool(self.int16_classes)

    @property
    def auto_int16(self) -> bool:
        """Whether ``auto_int16`` promotes tensors by default on this march (``int16.auto``).

        X5's toolchain computes every node in int8 unless the config asks for int16, and its
        published measurements are of such models; J5's accuracy flow promotes LayerNorm/Softmax.
        """
        auto = (self.raw.get("int16") or {}).get("auto", True)
        if isinstance(auto, dict):
            auto = auto.get("value", True)
        return self.has_int16 and bool(auto)

    @property
    def chip(self) -> str:
        return str(self.raw.get("chip", MARCH_CHIPS.get(self.name, self.name)))


def int16_requests(node_info: dict[str, Any] | None, enable_int16: bool, optimization: list[str] | None) -> list[str]:
    """The config settings that ask for int16 tensors (for the error on an int8-only march)."""
    asks = [f"model_parameters.node_info['{name}'] {key}: int16"
            for name, info in (node_info or {}).items() for key, v in (info or {}).items()
            if str(key).startswith(("InputType", "OutputType")) and str(v).lower() == "int16"]
    if enable_int16:
        asks.append("calibration_parameters.enable_int16: true")
    if "set_model_output_int16" in (optimization or []):
        asks.append("calibration_parameters.optimization: set_model_output_int16")
    return asks


def check_int16_supported(march: March, node_info: dict[str, Any] | None, enable_int16: bool,
                          optimization: list[str] | None) -> None:
    """An int8-only march (X3) refuses every explicit int16 request with the setting to remove.

    Horizon's toolchain offers int16 (``node_info`` InputType/OutputType, ``set_model_output_int16``)
    on J5 / RDK Ultra and RDK X5 (the X5 zoo's configs use it), not on X3; silently computing such a node in int8 would hide an accuracy fix the
    user asked for. ``auto_int16`` is a default, not a request: on these marches it is simply off.
    """
    if march.has_int16:
        return
    asks = int16_requests(node_info, enable_int16, optimization)
    if asks:
        raise InputError(f"{asks[0]}: march {march.name} ({march.chip}) computes in int8 only; int16 is a "
                         f"feature of J5 / RDK Ultra (bayes) and RDK X5 (bayes-e)",
                         "remove the int16 setting, or compile for march bayes or bayes-e")


def march_boards(raw: dict[str, Any]) -> tuple[str, dict[str, dict[str, Any]]]:
    """(default board, {board: its entry}) of a march file's ``boards`` section."""
    section = dict(raw.get("boards") or {})
    default = str(section.pop("default", ""))
    return default, {str(k): dict(v or {}) for k, v in section.items()}


def _on_board(raw: dict[str, Any], march: str, board: str) -> dict[str, Any]:
    """The march file with one board's parameter records put in place of the chip's.

    A board is the same BPU at another operating point (RDK Ultra's J5 is rated 96 TOPS, the
    automotive J5 128): the compiled program is the same, only the speed of running it differs.
    Every key of a board entry but ``description`` is a dotted parameter path of the march file.
    """
    import copy

    _, boards = march_boards(raw)
    out = copy.deepcopy(raw)
    for path, record in boards[board].items():
        if path == "description":
            continue
        node = out
        *parents, leaf = path.split(".")
        for part in parents:
            node = node[part]
        if leaf not in node:
            raise KeyError(f"march '{march}' board '{board}' overrides '{path}', which the march file lacks")
        node[leaf] = record
    return out


@lru_cache(maxsize=None)
def load_march(name: str, board: str | None = None) -> March:
    """Load a march by name (on one of its boards; None: the march's default board), or say which exist."""
    if name not in SUPPORTED_MARCHES:
        known = ", ".join(f"{m} ({MARCH_CHIPS[m]})" for m in SUPPORTED_MARCHES)
        raise InputError(f"march '{name}' is not supported", f"use one of: {known}")
    with open(_HERE / f"{name}.yaml", encoding="utf-8") as fh:
        raw = yaml.safe_load(fh)
    default, boards = march_boards(raw)
    chosen = board or default
    if not boards:
        return March(name, raw)
    if chosen not in boards:
        raise InputError(f"board '{board}' is not a board of march {name}",
                         f"use one of: {', '.join(boards)} (default {default})")
    return March(name, _on_board(raw, name, chosen), chosen)
