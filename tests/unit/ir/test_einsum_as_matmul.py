"""Einsum: the batched matrix products exporters write (attention scores and context, linear
layers) become Transpose / Reshape + MatMul in a float pass, exactly; other equations stay on the
CPU with a reason that names the equation; an Einsum attention block runs on the BPU end to end."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from hbtool.checker.placement import place_graph
from hbtool.ir.onnx_export import to_onnx
from hbtool.ir.onnx_import import import_onnx
from hbtool.ir.passes import optimize_float
from hbtool.ir.passes.einsum_to_matmul import einsum_to_matmul
from hbtool.march.description import load_march
from tests.helpers import cosine, make_model, run_ort, run_pipeline, tensor, vinfo

MATMUL_EQUATIONS = [
    ("bhlk,bhtk->bhlt", [(1, 2, 5, 4), (1, 2, 6, 4)]),   # CvT scores (k transposed)
    ("bhlt,bhtv->bhlv", [(1, 2, 5, 6), (1, 2, 6, 3)]),   # CvT context
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,jk->...ik", [(2, 3, 4), (4, 5)]),             # a linear layer
    ("bhqd,bkhd->bhqk", [(1, 2, 3, 4), (1, 5, 2, 4)]),   # heads on another axis of k
    ("ij,kj->ik", [(3, 4), (5, 4)]),
    ("bij,bjk->bki", [(2, 3, 4), (2, 4, 5)]),             # transposed output
    ("abcd,cd->ab", [(2, 3, 4, 5), (4, 5)]),              # two contracted letters
    ("bi,bi->b", [(3, 4), (3, 4)]),                       # batched dot product
    ("bij,jk", [(2, 3, 4), (4, 5)]),                      # implicit output
    ("bij,ajk->baik", [(2, 3, 4), (1, 4, 5)]),            # free letters on both sides
    ("bhij,bhjk->bhik", [(2, 1, 3, 4), (2, 3, 4, 5)]),    # a broadcast batch letter
    ("ij->ji", [(3, 4)]),                                 # a permutation
]


def einsum_model(equation, shapes, constant: int | None = None):
    """One Einsum node; operand ``constant`` (an index) is an initializer, the others are inputs."""
    out_shape = np.einsum(equation, *[np.zeros(s) for s in shapes]).shape
    rng = np.random.default_rng(3)
    names = [f"x{i}" for i in range(len(shapes))]
    inputs = [vinfo(n, s) for k, (n, s) in enumerate(zip(names, shapes)) if k != constant]
    inits = [] if constant is None else [tensor(names[constant], rng.standard_normal(shapes[constant]).astype(np.float32))]
    node = helper.make_node("Einsum", names, ["y"], name="einsum", equation=equation)
    return make_model([node], inputs, [vinfo("y", out_shape)], inits)


@pytest.mark.parametrize("equation,shapes", MATMUL_EQUATIONS, ids=[e for e, _ in MATMUL_EQUATIONS])
def test_batched_matmul_equations_become_matmul_exactly(equation, shapes):
    model = einsum_model(equation, shapes)
    graph = import_onnx(model)
    assert einsum_to_matmul(graph) == 1
    ops = [n.op_type for n in graph.nodes]
    assert "Einsum" not in ops and set(ops) <= {"MatMul", "Transpose", "Reshape"}
    assert ops.count("MatMul") == (0 if len(shapes) == 1 else 1)
    rng = np.random.default_rng(0)
    for _ in range(3):
        feeds = {f"x{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
        ref, = run_ort(model, feeds)
        got, = run_ort(to_onnx(graph), feeds)
        assert got.shape == ref.shape
        assert np.abs(got - ref).max() <= 1e-5 * max(1.0, np.abs(ref).max())


@pytest.mark.parametrize("equation,shapes,constant", [
    ("btc,dc->btd", [(1, 6, 8), (4, 8)], 1),
    ("dc,btc->btd", [(4, 8), (1, 6, 8)], 0),   # a constant on the left is swapped to the right
    ("ij,bjk->bik", [(5, 4), (2, 4, 3)], 0),
])
def test_constant_operand_becomes_a_weight_on_the_tensor_unit(equation, shapes, constant):
    model = einsum_model(equation, shapes, constant=constant)
    graph = import_onnx(model)
    optimize_float(graph)
    mm, = [n for n in graph.nodes if n.op_type == "MatMul"]
    assert graph.is_const(mm.inputs[1]) and len(graph.shape(mm.inputs[1])) == 2
    place_graph(graph, load_march("bayes"))
    assert mm.meta["on"] == "BPU" and mm.meta["unit"] == "tensor"
    x_shape = shapes[1 - constant]
    feeds = {f"x{1 - constant}": np.random.default_rng(1).standard_normal(x_shape).astype(np.float32)}
    ref, = run_ort(model, feeds)
    assert np.abs(run_ort(to_onnx(graph), feeds)[0] - ref).max() <= 1e-5 * max(1.0, np.abs(ref).max())


@pytest.mark.parametrize("equation,shapes,why", [
    ("ii->i", [(3, 3)], "a diagonal"),
    ("ij,jk->i", [(3, 4), (4, 5)], "summed away inside one operand"),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], "more than two operands"),
])
def test_other_equations_stay_on_the_cpu_naming_the_equation(equation, shapes, why):
    graph = import_onnx(einsum_model(equation, shapes))
    optimize_float(graph)
    place_graph(graph, load_march("bayes"))
    node, = [n for n in graph.nodes if n.op_type == "Einsum"]
    assert node.meta["on"] == "CPU"
    assert f"Einsum '{equation}'" in node.meta["reason"] and why in node.meta["reason"]


def einsum_attention_block(tokens: int = 16, dim: int = 16, heads: int = 2):
    """x (1, T, C) -> q, k, v linear layers as Einsum -> heads -> Einsum scores * scale -> Softmax
    -> Einsum context -> merge heads -> Einsum output projection -> y, as HF CvT writes it."""
    rng = np.random.default_rng(0)
    hd = dim // heads
    inits = {f"w{n}": (rng.standard_normal((dim, dim)) / np.sqrt(dim)).astype(np.float32) for n in "qkvo"}
    inits["heads_shape"] = np.array([1, tokens, heads, hd], np.int64)
    inits["merged_shape"] = np.array([1, tokens, dim], np.int64)
    inits["scale"] = np.array(hd ** -0.5, np.float32)
    nodes = []
    for n in "qkv":
        nodes += [helper.make_node("Einsum", ["x", f"w{n}"], [f"{n}_lin"], name=f"{n}_proj", equation="...ij,jk->...ik"),
                  helper.make_node("Reshape", [f"{n}_lin", "heads_shape"], [f"{n}_r"], name=f"{n}_reshape"),
                  helper.make_node("Transpose", [f"{n}_r"], [f"{n}_h"], name=f"{n}_heads", perm=[0, 2, 1, 3])]
    nodes += [
        helper.make_node("Einsum", ["q_h", "k_h"], ["scores"], name="scores", equation="bhlk,bhtk->bhlt"),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"], name="scale_mul"),
        helper.make_node("Softmax", ["scaled"], ["probs"], name="softmax", axis=-1),
        helper.make_node("Einsum", ["probs", "v_h"], ["context"], name="context", equation="bhlt,bhtv->bhlv"),
        helper.make_node("Transpose", ["context"], ["context_t"], name="merge_t", perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["context_t", "merged_shape"], ["merged"], name="merge"),
        helper.make_node("Einsum", ["merged", "wo"], ["y"], name="out_proj", equation="...ij,jk->...ik"),
    ]
    return make_model(nodes, [vinfo("x", [1, tokens, dim])], [vinfo("y", [1, tokens, dim])],
                      [tensor(k, v) for k, v in inits.items()])


def test_einsum_attention_block_runs_on_the_bpu_bit_exact(tmp_path):
    model = einsum_attention_block()
    calibration, compiled, feeds, simulated, quantized, floats = run_pipeline(model, tmp_path, (1, 16, 16))
    program = compiled.program
    assert not [n for n in program.nodes if n.op_type == "Einsum"]
    assert compiled.fallbacks == [] and compiled.cpu_subgraphs == []
    on_bpu = {n.name for n in program.nodes if n.meta.get("on") == "BPU"}
    assert {"scores", "context", "softmax", "q_proj", "out_proj"} <= on_bpu
    for sim, q, f in zip(simulated, quantized, floats):
        assert np.array_equal(sim[0], q[0])
        assert cosine(sim[0], f[0]) > 0.99
