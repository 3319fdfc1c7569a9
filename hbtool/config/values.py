"""Reading single YAML values: each reader takes the key path and raises ConfigError with it."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NoReturn

from hbtool.errors import ConfigError


def fail(path: str, problem: str, fix: str | None = None) -> NoReturn:
    """Raise the ConfigError every check uses: ``<key path>: <problem>; fix: <fix>``."""
    raise ConfigError(f"{path}: {problem}", fix)


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate that ``word`` looks like a misspelling of, if any."""
    cands = list(candidates)
    lowered = {c.lower(): c for c in cands}
    w = word.lower()
    contained = [c for c in lowered if len(c) >= 3 and len(w) >= 3 and (c in w or w in c)]
    if len(contained) == 1:
        return lowered[contained[0]]
    hit = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[hit[0]] if hit else None


def describe(value: Any) -> str:
    """A value as the user wrote it, with its YAML type when that is the problem."""
    if isinstance(value, bool):
        return f"{value} (a boolean)"
    if isinstance(value, str):
        return f"'{value}' (a string)"
    if isinstance(value, (int, float)):
        return f"{value} (a number)"
    if isinstance(value, list):
        return f"{value!r} (a list)"
    if isinstance(value, dict):
        return "a mapping"
    if value is None:
        return "nothing"
    return repr(value)


def is_unset(value: Any) -> bool:
    """None, an empty string, an empty list or mapping: the key was left empty."""
    if value is None:
        return True
    if isinstance(value, str) and not value.strip():
        return True
    if isinstance(value, (list, dict)) and not value:
        return True
    return False


def is_none_word(value: Any) -> bool:
    """An entry that stands for "no value for this input": null, '', or Horizon's 'None'."""
    return value is None or (isinstance(value, str) and value.strip() in ("", "None", "none"))


def read_bool(path: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    fail(path, f"expected true or false, got {describe(value)}", "write true or false")


def _check_range(path: str, value: float, lo: float | None, hi: float | None,
                 lo_exclusive: bool, allowed_doc: str | None) -> None:
    low_bad = lo is not None and (value <= lo if lo_exclusive else value < lo)
    high_bad = hi is not None and value > hi
    if not (low_bad or high_bad):
        return
    if allowed_doc:
        want = allowed_doc
    elif lo is not None and hi is not None:
        want = (f"more than {lo:g} and at most {hi:g}" if lo_exclusive
                else f"from {lo:g} to {hi:g}")
    elif lo is not None:
        want = f"more than {lo:g}" if lo_exclusive else f"at least {lo:g}"
    else:
        want = f"at most {hi:g}"
    fail(path, f"expected {want}, got {value}", f"use a value {want}")


def read_int(path: str, value: Any, lo: float | None = None, hi: float | None = None,
             lo_exclusive: bool = False, allowed_doc: str | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        hint = "remove the quotes" if isinstance(value, str) and _looks_numeric(value) \
            else "write a whole number"
        fail(path, f"expected an integer, got {describe(value)}", hint)
    _check_range(path, value, lo, hi, lo_exclusive, allowed_doc)
    return value


def read_float(path: str, value: Any, lo: float | None = None, hi: float | None = None,
               lo_exclusive: bool = False, allowed_doc: str | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        hint = "remove the quotes" if isinstance(value, str) and _looks_numeric(value) \
            else "write a number"
        fail(path, f"expected a number, got {describe(value)}", hint)
    _check_range(path, float(value), lo, hi, lo_exclusive, allowed_doc)
    return float(value)


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_str(path: str, value: Any) -> str:
    if not isinstance(value, str):
        fail(path, f"expected a string, got {describe(value)}", "write the value as text")
    return value.strip()


def read_enum(path: str, value: Any, allowed: tuple[str, ...]) -> str:
    """One of ``allowed``, matched case-insensitively; returned in its canonical spelling."""
    if not isinstance(value, str):
        fail(path, f"expected one of {', '.join(allowed)}, got {describe(value)}",
             f"write one of {', '.join(allowed)}")
    text = value.strip()
    for option in allowed:
        if option.lower() == text.lower():
            return option
    guess = closest(text, allowed)
    hint = f"did you mean '{guess}'? " if guess else ""
    fail(path, f"'{text}' is not one of {', '.join(allowed)}",
         f"{hint}use one of {', '.join(allowed)}")


def read_path(path: str, value: Any, base_dir: Path) -> Path:
    if isinstance(value, Path):
        text = str(value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        fail(path, f"expected a file or folder path, got {describe(value)}", "write the path as text")
    p = Path(text).expanduser()
    if not p.is_absolute():
        p = base_dir / p
    return Path(_normalize(p))


def _normalize(p: Path) -> str:
    # Resolve '..' and '.' without touching the filesystem (files may not exist yet).
    import os

    return os.path.normpath(str(p))


def split_list(path: str, value: Any, separators: str = ";") -> list[str]:
    """A ``;``-separated string or a YAML list of strings, as a list of non-empty strings."""
    if isinstance(value, str):
        parts = re.split("[" + re.escape(separators) + "]", value)
        return [p.strip() for p in parts if p.strip()]
    if isinstance(value, list):
        out = []
        for i, item in enumerate(value):
            if isinstance(item, int) and not isinstance(item, bool):
                item = str(item)  # a node named e.g. 123
            if not isinstance(item, str):
                fail(path, f"item {i + 1} should be a string, got {describe(item)}",
                     "write each item as text")
            if item.strip():
                out.append(item.strip())
        return out
    fail(path, f"expected a '{separators[0]}'-separated string or a list, got {describe(value)}",
         "write e.g. 'a;b' or a YAML list")


def read_names(path: str, value: Any) -> list[str]:
    names = split_list(path, value, ";")
    seen: set[str] = set()
    for name in names:
        if name in seen:
            fail(path, f"'{name}' is listed twice", "list each name once")
        seen.add(name)
    return names


def read_enum_list(path: str, value: Any, allowed: tuple[str, ...]) -> list[str]:
    out = []
    for item in split_list(path, value, ";,"):
        canon = read_enum(path, item, allowed)
        if canon not in out:
            out.append(canon)
    return out


# ----------------------------------------------------------------------------------------------
# shapes and number lists (per-input entries)
# ----------------------------------------------------------------------------------------------

SHAPE_EXAMPLE = "1x3x224x224"
#: the shape of a rank-0 input (an audio model's sample rate): ``input_shape: scalar``, ``--input-shape sr scalar``
SCALAR = "scalar"


def parse_shape(value: Any) -> tuple[int, ...]:
    """``"1x3x224x224"`` or ``"1,3,224,224"`` (or a list of ints) -> ``(1, 3, 224, 224)``; ``"scalar"``
    (or an empty YAML list) -> ``()``, the shape of a rank-0 input.

    Raises ValueError whose message can follow a key path (``<key>: <message>``).
    """
    if isinstance(value, str) and value.strip().lower() == SCALAR:
        return ()
    if isinstance(value, (list, tuple)):
        items: list[Any] = list(value)
        text = "x".join(str(v) for v in items)
        if not items:
            return ()   # a YAML [] is a rank-0 shape, as ``scalar`` is
    elif isinstance(value, str):
        text = value.strip()
        sep = "," if "," in text else "x"
        items = [p.strip() for p in text.lower().split(sep)]
    elif isinstance(value, int) and not isinstance(value, bool):
        items, text = [value], str(value)
    else:
        raise ValueError(f"expected a shape like {SHAPE_EXAMPLE}, got {describe(value)}")
    if not items or any(p == "" for p in items):
        raise ValueError(f"expected a shape like {SHAPE_EXAMPLE}, got '{text}'")
    dims: list[int] = []
    for p in items:
        if isinstance(p, bool):
            raise ValueError(f"expected a shape like {SHAPE_EXAMPLE}, got '{text}'")
        if isinstance(p, int):
            d = p
        elif isinstance(p, str) and re.fullmatch(r"[+-]?\d+", p):
            d = int(p)
        else:
            raise ValueError(f"expected a shape like {SHAPE_EXAMPLE} with integer dimensions, "
                             f"got '{text}'")
        if d <= 0:
            raise ValueError(f"every dimension must be a positive integer (a fixed size), "
                             f"got '{text}'")
        dims.append(d)
    return tuple(dims)


def format_shape(shape: tuple[int, ...]) -> str:
    """``1x3x224x224``; ``scalar`` for a rank-0 shape (what :func:`parse_shape` reads back)."""
    return "x".join(str(d) for d in shape) if len(shape) else SCALAR


def parse_floats(value: Any) -> tuple[float, ...]:
    """``"123.675 116.28 103.53"`` (spaces or commas), one number, or a list of numbers."""
    if isinstance(value, bool):
        raise ValueError(f"expected numbers, got {describe(value)}")
    if isinstance(value, (int, float)):
        return (float(value),)
    if isinstance(value, str):
        parts = [p for p in re.split(r"[\s,]+", value.strip()) if p]
    elif isinstance(value, (list, tuple)):
        parts = list(value)
    else:
        raise ValueError(f"expected numbers separated by spaces, got {describe(value)}")
    if not parts:
        raise ValueError("expected at least one number")
    out = []
    for p in parts:
        if isinstance(p, bool):
            raise ValueError(f"expected numbers, got {describe(p)}")
        try:
            out.append(float(p))
        except (TypeError, ValueError):
            raise ValueError(f"expected numbers separated by spaces (e.g. '123.675 116.28 "
                             f"103.53'), got {describe(value)}") from None
    return tuple(out)
