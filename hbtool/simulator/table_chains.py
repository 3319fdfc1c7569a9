"""Chains of elementwise steps of one input that ``simulate`` runs as one table lookup.

A step that reads one computed tensor and maps each element on its own (a table lookup, a Mul or an Add by a
one-element constant) is a function of one integer code. A chain of such steps, each the only reader of the
one before it, is again a function of the first step's input code: evaluated once on all ``2**bits`` codes
by the kernels' own numpy forms (:func:`.accel.tabulate_chain`), it runs as one gather. The PP-OCRv5
recogniser's blocks are ``conv -> x * s + b -> hard-swish table -> x * s + b -> conv``: five steps (three
passes after the affine pairs, :func:`.executor._fuse_scalar_affine_pairs`) become one lookup, 28 times a
line. Only chains holding a table are merged: a pair of arithmetic steps alone stays the pair's loop, which
is faster than a gather. Every element gets the value the steps give it one after the other, so the bits are
the same; ``Executor.run(keep=...)`` asking for a tensor inside a chain runs the steps one by one.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from hbtool.simulator import accel

# A chain is tabulated only over inputs of at most this many bits (a 65,536-entry table).
MAX_TABLE_BITS = 16


def _unary(step, program, scalar_operand: Callable) -> tuple[Callable, int, str] | None:
    """``(numpy form of the step as a function of its one computed input, that input's bits, its name)`` for
    a step that maps each element of one computed tensor on its own, else None."""
    kernel = step.node.meta.get("kernel")
    kind = type(kernel).__name__
    if len(step.outputs) != 1 or not step.outputs[0] or step.sampleless:
        return None
    if kind == "Lut":
        if len(step.inputs) != 1 or not step.inputs[0] or step.node.meta.get("in_perms") \
                or step.node.meta.get("out_perm") is not None:
            return None
        return kernel.apply_numpy, int(kernel.in_bits), step.inputs[0]
    if kind in ("Mul", "Add"):
        operand = scalar_operand(step, program)  # (computed input, the constant's index, the constant) or None
        rq = getattr(kernel, "requant", None)
        per_tensor = (rq.M, rq.n, rq.clamp_acc, rq.pre_shift) if kind == "Mul" else (kernel.A, kernel.B, kernel.n)
        if operand is None or any(np.size(v) != 1 for v in per_tensor):  # per-channel: not a function of the code
            return None
        x, k, const = operand
        if k == 0:
            return (lambda v: kernel.apply_numpy(const, v)), int(kernel.b_bits), x
        return (lambda v: kernel.apply_numpy(v, const)), int(kernel.a_bits), x
    return None


def merge_table_chains(steps: list, program, scalar_operand: Callable) -> tuple[list, set[str]]:
    """``steps`` with each chain of two or more elementwise steps holding a table (module docstring) as one
    step where its first step ran, and the names of the tensors no longer computed.

    ``scalar_operand(step, program)``: the executor's test for a Mul / Add by a one-element constant (its
    computed input, the constant's index and value), so both passes agree on which steps are elementwise.
    """
    if not accel.TABLE_CHAINS:
        return steps, set()
    readers: dict[str, list[int]] = {}
    for k, step in enumerate(steps):
        for name in step.inputs:
            if name:
                readers.setdefault(name, []).append(k)
    forms = [_unary(step, program, scalar_operand) for step in steps]
    out, away, taken = [], set(), set()
    for k, step in enumerate(steps):
        if k in taken:
            continue
        chain = [k]
        while True:
            mid = steps[chain[-1]].outputs[0] if forms[chain[-1]] is not None else None
            nxt = readers.get(mid, []) if mid and mid not in program.outputs else []
            if len(nxt) != 1 or forms[nxt[0]] is None or forms[nxt[0]][2] != mid or nxt[0] in taken:
                break
            chain.append(nxt[0])
        merged = _merged(steps, forms, chain) if len(chain) > 1 else None
        if merged is None:
            out.append(step)
            continue
        out.append(merged)
        taken.update(chain)
        away.update(steps[j].outputs[0] for j in chain[:-1])
    return out, away


def _merged(steps: list, forms: list, chain: list[int]):
    """One step running the steps ``chain`` as one lookup, or None (no table in it, too wide an input)."""
    if not any(type(steps[j].node.meta.get("kernel")).__name__ == "Lut" for j in chain):
        return None
    bits = forms[chain[0]][1]
    if bits > MAX_TABLE_BITS:
        return None
    last = steps[chain[-1]]
    chain_forms = [forms[j][0] for j in chain]
    try:
        lookup = accel.tabulate_chain(chain_forms, bits, accel.writes_through(last.fast))
    except Exception:  # a form that refuses some code of the input's range: the steps run one by one
        return None
    if lookup is None:
        return None

    def numpy_form(x: np.ndarray) -> np.ndarray:  # the kernels' own forms, while the lookup's loop compiles
        for form in chain_forms:
            x = form(x)
        return x

    apply = accel.numpy_until_compiled(lookup, numpy_form)

    def run(xs: list[Any]) -> list[np.ndarray]:
        return [apply(xs[0])]

    first = steps[chain[0]]
    free = [name for j in chain for name in steps[j].free_after]
    return dataclasses.replace(first, node=last.node, run=run, inputs=[forms[chain[0]][2]], outputs=list(last.outputs),
                               free_after=list(dict.fromkeys(free)), fast=lookup)
