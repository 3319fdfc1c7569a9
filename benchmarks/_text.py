"""English sentences from what is installed: the first sentences of Python standard-library docstrings.

No download and no import of the modules (importing ``antigravity`` opens a browser, ``this``
prints, GUI modules need a display): the ``.py`` files of the standard library are parsed with
``ast`` and the docstrings of modules, classes and functions are read from the syntax tree.

The corpus is deterministic for a given Python build: files in sorted path order, docstrings in
source order, first sentence of the first paragraph, whitespace collapsed, kept when it has
8-60 words, looks like prose (starts with a capital letter, few code characters) and was not
seen before (case-insensitive). ``split_corpus`` then draws calibration and evaluation sets
with a seeded permutation, so both span the whole library rather than its first packages.
"""

from __future__ import annotations

import ast
import re
import sysconfig
from pathlib import Path

import numpy as np

_SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__", "lib2to3", "turtledemo"}
_CODE_CHARS = set("{}[]<>=|\\`$#@~^*_")
_SENTENCE_END = re.compile(r"(?<=[a-z0-9\)\"'])[.!?](?=\s|$)")


def _first_sentence(doc: str) -> str | None:
    para = doc.strip().split("\n\n", 1)[0]
    text = " ".join(para.split())
    if not text:
        return None
    m = _SENTENCE_END.search(text)
    if m is None:
        return None
    return text[: m.end()]


def _plausible(s: str) -> bool:
    words = s.split()
    if not 8 <= len(words) <= 60:
        return False
    if not s[0].isupper() or ">>>" in s or "::" in s or "http" in s:
        return False
    if sum(c in _CODE_CHARS for c in s) > 2:
        return False
    if not s.isascii():
        return False
    letters = sum(c.isalpha() for c in s)
    return letters >= 0.7 * len(s.replace(" ", ""))


def stdlib_sentences() -> list[str]:
    """Every plausible, de-duplicated first docstring sentence of the standard library, in a fixed order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    seen: set[str] = set()
    out: list[str] = []
    files = sorted(p for p in root.rglob("*.py") if not (set(p.relative_to(root).parts[:-1]) & _SKIP_DIRS))
    for path in files:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
            continue
        nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        for node in nodes:
            doc = ast.get_docstring(node, clean=True)
            if not doc:
                continue
            s = _first_sentence(doc)
            if s is None or not _plausible(s):
                continue
            key = s.lower()
            if key in seen:
                continue
            seen.add(key)
            out.append(s)
    return out


def split_corpus(n_cal: int, n_eval: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """(calibration sentences, evaluation sentences), disjoint, drawn with a seeded permutation."""
    sents = stdlib_sentences()
    if len(sents) < n_cal + n_eval:
        raise RuntimeError(f"only {len(sents)} sentences in the standard library corpus, need {n_cal + n_eval}")
    order = np.random.default_rng(seed).permutation(len(sents))
    picked = [sents[i] for i in order[: n_cal + n_eval]]
    return picked[:n_cal], picked[n_cal:]


if __name__ == "__main__":
    s = stdlib_sentences()
    cal, ev = split_corpus(64, 200)
    print(f"{len(s)} sentences; first calibration sentences:")
    for line in cal[:8]:
        print(" -", line)
    print("first evaluation sentences:")
    for line in ev[:5]:
        print(" -", line)
