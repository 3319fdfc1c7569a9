"""Einsum -> Transpose / Reshape / MatMul, the ops the BPU has.

Exporters write attention and linear layers as Einsum (HF CvT: ``bhlk,bhtk->bhlt`` for the
scores, ``bhlt,bhtv->bhlv`` for the context; ``...ij,jk->...ik`` for a projection). Every such
equation is a batched matrix product once its letters are sorted into four roles:

* batch ``B``: in both operands and the output;
* contracted ``K``: in both operands, not in the output;
* free rows ``M``: only in the first operand and the output;
* free columns ``N``: only in the second operand and the output.

The first operand is transposed to ``(B, M, K)`` and reshaped to ``(B, prod M, prod K)``, the
second to ``(B, prod K, prod N)``, one MatMul gives ``(B, prod M, prod N)``, and a reshape and a
transpose put the output letters in the equation's order. Without batch letters the first
operand keeps its row dimensions unflattened and the second becomes a 2-D ``[K, N]`` matrix,
so a constant one is a weight (a constant first operand is swapped to the right: rows and
columns trade places, the final transpose restores the order). Identity transposes
and reshapes are not written; constant operands are rearranged at once. The MatMul sums the
same products as the Einsum, so the results agree to float32 rounding.

A one-operand equation that only permutes its letters is a Transpose. Anything else (a letter
repeated in one operand, i.e. a diagonal; a letter summed away inside one operand; more than
two operands; batch dimensions that do not broadcast) is not a batched matrix product: the
node stays an Einsum, and the checker places it on the CPU with :func:`einsum_plan`'s reason.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from math import prod

import numpy as np

from hbtool.ir.graph import Graph, Node


@dataclass(frozen=True)
class EinsumPlan:
    """The letter roles of a two-operand (or one-operand permutation) equation."""

    inputs: tuple[str, ...]  # the operands' letters, ellipses expanded
    output: str
    batch: str = ""
    rows: str = ""      # M
    contract: str = ""  # K
    cols: str = ""      # N


def equation_of(node: Node) -> str:
    return node.attr_text("equation", "")


def _expand_ellipsis(terms: list[str], ranks: list[int], out: str | None) -> tuple[list[str], str | None, str]:
    """Replace ``...`` by fresh upper-case letters (aligned from the right, as numpy broadcasts)."""
    used = set("".join(terms) + (out or ""))
    spare = [c for c in string.ascii_uppercase if c not in used]
    widths = [r - len(t.replace("...", "")) if "..." in t else 0 for t, r in zip(terms, ranks)]
    if any(w < 0 for w in widths):
        raise ValueError("operand rank is smaller than its subscripts")
    width = max(widths, default=0)
    letters = "".join(spare[:width])
    new_terms = [t.replace("...", letters[width - w:]) for t, w in zip(terms, widths)]
    new_out = None if out is None else out.replace("...", letters)
    return new_terms, new_out, letters


def einsum_plan(equation: str, ranks: list[int]) -> tuple[EinsumPlan | None, str]:
    """The plan of ``equation`` for operands of ``ranks``, or ``(None, why it is not a batched matmul)``."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        return None, f"{len(terms)} subscripts for {len(ranks)} operands"
    if len(terms) > 2:
        return None, "more than two operands"
    try:
        terms, out_x, ell = _expand_ellipsis(terms, ranks, out if arrow else None)
    except ValueError as e:
        return None, str(e)
    if not arrow:  # implicit output: the ellipsis, then the letters used once, in alphabetical order
        once = sorted(c for c in set("".join(terms)) if "".join(terms).count(c) == 1 and c not in ell)
        out_x = ell + "".join(once)
    assert out_x is not None
    for t, r in zip(terms, ranks):
        if len(t) != r:
            return None, f"subscripts '{t}' do not match an operand of rank {r}"
        if len(set(t)) != len(t):
            return None, f"a letter repeats in '{t}' (a diagonal)"
    if len(set(out_x)) != len(out_x) or not set(out_x) <= set("".join(terms)):
        return None, "the output subscripts are not distinct letters of the operands"
    if len(terms) == 1:
        if set(terms[0]) != set(out_x):
            return None, "a letter is summed away inside one operand"
        return EinsumPlan((terms[0],), out_x), ""
    a, b = terms
    if (set(a) - set(b)) - set(out_x) or (set(b) - set(a)) - set(out_x):
        return None, "a letter is summed away inside one operand"
    batch = "".join(c for c in out_x if c in a and c in b)
    contract = "".join(c for c in a if c in b and c not in out_x)
    rows = "".join(c for c in out_x if c in a and c not in b)
    cols = "".join(c for c in out_x if c in b and c not in a)
    return EinsumPlan((a, b), out_x, batch, rows, contract, cols), ""


def einsum_not_matmul_reason(node: Node, graph: Graph) -> str | None:
    """Why this Einsum node is not a batched matrix product (None when it is one)."""
    ranks = [len(graph.shape(i) or ()) for i in node.inputs]
    if any(graph.shape(i) is None for i in node.inputs):
        return "an operand has no static shape"
    plan, why = einsum_plan(equation_of(node), ranks)
    if plan is None:
        return why
    if len(plan.inputs) == 2:
        sa, sb = graph.shape(node.inputs[0]), graph.shape(node.inputs[1])
        da, db = dict(zip(plan.inputs[0], sa)), dict(zip(plan.inputs[1], sb))
        for c in plan.contract:
            if da[c] != db[c]:
                return f"contracted '{c}' has sizes {da[c]} and {db[c]}"
        for c in plan.batch:
            if da[c] != db[c] and 1 not in (da[c], db[c]):
                return f"batch '{c}' has sizes {da[c]} and {db[c]}"
    return None


class _Writer:
    """Appends the replacement nodes before the Einsum, folding constant operands."""

    def __init__(self, graph: Graph, node: Node):
        self.graph, self.node = graph, node
        self.index = graph.nodes.index(node)
        self.dtype = graph.dtype(node.outputs[0]) or graph.dtype(node.inputs[0])
        self.count = 0

    def _emit(self, op: str, inputs: list[str], shape: tuple[int, ...], attrs: dict | None = None,
              output: str | None = None) -> str:
        self.count += 1
        name = f"{self.node.name}/{op}_{self.count}" if output is None else self.node.name
        outs = [output] if output is not None else 1
        new = self.graph.add_node(op, inputs, outs, attrs, name=name, index=self.index)
        self.index += 1
        self.graph.set_value(new.outputs[0], shape, self.dtype)
        return new.outputs[0]

    def transpose(self, x: str, perm: list[int], output: str | None = None) -> str:
        shape = self.graph.shape(x)
        if perm == list(range(len(perm))) and output is None:
            return x
        data = self.graph.const(x)
        if data is not None and output is None:
            return self.graph.add_const(np.transpose(data, perm), hint=f"{self.node.name}_T")
        return self._emit("Transpose", [x], tuple(shape[p] for p in perm), {"perm": list(perm)}, output)

    def reshape(self, x: str, shape: tuple[int, ...], output: str | None = None) -> str:
        if tuple(self.graph.shape(x)) == tuple(shape) and output is None:
            return x
        data = self.graph.const(x)
        if data is not None and output is None:
            return self.graph.add_const(np.reshape(data, shape), hint=f"{self.node.name}_R")
        target = self.graph.add_const(np.array(shape, np.int64), hint=f"{self.node.name}_shape")
        return self._emit("Reshape", [x, target], tuple(shape), None, output)

    def matmul(self, a: str, b: str, shape: tuple[int, ...], output: str | None = None) -> str:
        return self._emit("MatMul", [a, b], shape, None, output)


def _rewrite(graph: Graph, node: Node, plan: EinsumPlan) -> None:
    w = _Writer(graph, node)
    graph.remove_node(node)  # first, so that the last new node can take the Einsum's name
    out = node.outputs[0]
    if len(plan.inputs) == 1:
        t = plan.inputs[0]
        w.transpose(node.inputs[0], [t.index(c) for c in plan.output], output=out)
        return
    (ta, tb), (xa, xb) = plan.inputs, node.inputs
    if graph.is_const(xa) and not graph.is_const(xb):
        # a constant on the left: swap the operands (rows <-> columns) so that it is the weight on the right
        (ta, tb), (xa, xb) = (tb, ta), (xb, xa)
        plan = EinsumPlan((ta, tb), plan.output, plan.batch, plan.cols, plan.contract, plan.rows)
    da = dict(zip(ta, graph.shape(xa)))
    db = dict(zip(tb, graph.shape(xb)))
    size = {**da, **db}
    for c in plan.batch:
        size[c] = max(da[c], db[c])
    m = prod(da[c] for c in plan.rows)
    k = prod(da[c] for c in plan.contract)
    n = prod(db[c] for c in plan.cols)
    if plan.batch:
        a_order, b_order = plan.batch + plan.rows + plan.contract, plan.batch + plan.contract + plan.cols
        a = w.reshape(w.transpose(xa, [ta.index(c) for c in a_order]), tuple(da[c] for c in plan.batch) + (m, k))
        b = w.reshape(w.transpose(xb, [tb.index(c) for c in b_order]), tuple(db[c] for c in plan.batch) + (k, n))
        lead = tuple(size[c] for c in plan.batch)
        prod_shape = lead + (m, n)
    else:  # rows unflattened, a 2-D [K, N] right operand: a constant one is a Linear weight
        a_order, b_order = plan.rows + plan.contract, plan.contract + plan.cols
        a = w.reshape(w.transpose(xa, [ta.index(c) for c in a_order]), tuple(da[c] for c in plan.rows) + (k,))
        b = w.reshape(w.transpose(xb, [tb.index(c) for c in b_order]), (k, n))
        lead = tuple(da[c] for c in plan.rows)
        prod_shape = lead + (n,)
    natural = plan.batch + plan.rows + plan.cols
    natural_shape = tuple(size[c] for c in natural)
    final_perm = [natural.index(c) for c in plan.output]
    y_shape = tuple(size[c] for c in plan.output)
    needs_reshape = tuple(prod_shape) != natural_shape
    needs_transpose = final_perm != list(range(len(final_perm)))
    y = w.matmul(a, b, prod_shape, output=None if (needs_reshape or needs_transpose) else out)
    if needs_reshape:
        y = w.reshape(y, natural_shape, output=None if needs_transpose else out)
    if needs_transpose:
        w.transpose(y, final_perm, output=out)
    graph.set_value(out, y_shape, w.dtype)


def einsum_to_matmul(graph: Graph) -> int:
    """Rewrite every Einsum that is a batched matrix product (or a permutation) into MatMul / Transpose / Reshape."""
    count = 0
    for node in list(graph.nodes):
        if node.op_type != "Einsum" or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
            continue
        if einsum_not_matmul_reason(node, graph) is not None:
            continue
        dtype = graph.dtype(node.outputs[0])
        if dtype is not None and not np.issubdtype(dtype, np.floating):
            continue
        plan, _ = einsum_plan(equation_of(node), [len(graph.shape(i)) for i in node.inputs])
        assert plan is not None
        _rewrite(graph, node, plan)
        count += 1
    return count
