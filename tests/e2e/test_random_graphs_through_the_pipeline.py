"""Property test: random small graphs go through calibrate, compile and simulate, and the
simulator agrees with the quantized ONNX model in onnxruntime bit for bit (0 LSB).

Graphs chain convolutions, matmuls, adds/muls (with constants or an earlier branch), concat,
nearest and bilinear x2 resizes, reshape/transpose, softmax, LayerNorm, GELU, sigmoid, ReLU and
pooling in random order, with random shapes and constant magnitudes. Calibration uses random
inputs (``calibration_type: skip``) so no files are needed. The default run takes
``FUZZ_EXAMPLES`` examples (200); ``HYPOTHESIS_PROFILE=nightly`` (scripts/nightly.sh fuzz) runs
many more.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from hbtool.compiler.artifact import from_bytes
from hbtool.compiler.compile import compile_model
from hbtool.config import config_from_dict
from hbtool.quant.calibrate import run_calibration, write_outputs
from hbtool.simulator.executor import Executor

FUZZ_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "200"))
OPS_4D = ("conv", "conv_s2", "dwconv", "add_const", "mul_const", "relu", "sigmoid", "avgpool", "maxpool", "concat_self", "add_branch",
          "resize_nearest", "resize_linear")
OPS_3D = ("linear", "softmax", "layernorm", "gelu", "add_const", "mul_branch", "transpose_matmul", "add_branch", "relu")


class _Builder:
    def __init__(self, rng: np.random.Generator):
        self.rng, self.nodes, self.inits, self.k = rng, [], [], 0

    def name(self, hint: str) -> str:
        self.k += 1
        return f"{hint}_{self.k}"

    def const(self, a: np.ndarray, hint: str = "c") -> str:
        n = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(a, np.float32) if np.asarray(a).dtype.kind == "f" else np.asarray(a), n))
        return n

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out


def build_graph(ops: list[str], seed: int, channels: int, size: int, scale: float) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    b = _Builder(rng)
    x = "x"
    c, h = channels, size
    earlier: list[tuple[str, tuple]] = []
    for op in [o for o in ops if o in OPS_4D]:
        if op in ("conv", "conv_s2"):
            co = int(rng.integers(2, 9))
            w = rng.standard_normal((co, c, 3, 3)) * scale / np.sqrt(9 * c)
            stride = 2 if op == "conv_s2" and h >= 4 else 1
            x = b.node("Conv", [x, b.const(w, "w"), b.const(rng.standard_normal(co) * 0.1, "b")], pads=[1, 1, 1, 1], strides=[stride, stride])
            c, h = co, (h + 1) // stride if stride == 2 else h
        elif op == "dwconv":
            w = rng.standard_normal((c, 1, 3, 3)) * scale
            x = b.node("Conv", [x, b.const(w, "w")], pads=[1, 1, 1, 1], group=c)
        elif op == "add_const":
            x = b.node("Add", [x, b.const(rng.standard_normal((1, c, 1, 1)) * scale, "a")])
        elif op == "mul_const":
            x = b.node("Mul", [x, b.const(rng.uniform(0.1, 2.0, (1, c, 1, 1)), "m")])
        elif op == "relu":
            x = b.node("Relu", [x])
        elif op == "sigmoid":
            x = b.node("Sigmoid", [x])
        elif op == "avgpool" and h >= 2:
            x = b.node("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2])
            h //= 2
        elif op == "maxpool" and h >= 2:
            x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
            h //= 2
        elif op in ("resize_nearest", "resize_linear") and h <= 4:
            linear = op == "resize_linear"
            x = b.node("Resize", [x, "", b.const(np.array([1, 1, 2, 2], np.float32), "scales")],
                       mode="linear" if linear else "nearest",
                       coordinate_transformation_mode="half_pixel" if linear else "asymmetric")
            h *= 2
        elif op == "concat_self":
            y = b.node("Relu", [x])
            x = b.node("Concat", [x, y], axis=1)
            c *= 2
        elif op == "add_branch":
            same = [t for t, s in earlier if s == (c, h)]
            if same:
                x = b.node("Add", [x, same[-1]])
        earlier.append((x, (c, h)))
    # tokens: (1, L, D)
    L, D = h * h, c
    x = b.node("Reshape", [x, b.const(np.array([1, c, L], np.int64), "shape")])
    x = b.node("Transpose", [x], perm=[0, 2, 1])
    toks: list[tuple[str, int]] = [(x, D)]
    for op in [o for o in ops if o in OPS_3D]:
        if op == "linear":
            n = int(rng.integers(2, 17))
            x = b.node("MatMul", [x, b.const(rng.standard_normal((D, n)) * scale / np.sqrt(D), "w")])
            x = b.node("Add", [x, b.const(rng.standard_normal(n) * 0.1, "b")])
            D = n
        elif op == "softmax":
            x = b.node("Softmax", [x], axis=-1)
        elif op == "layernorm":
            x = b.node("LayerNormalization", [x, b.const(rng.uniform(0.5, 1.5, D), "g"), b.const(rng.standard_normal(D) * 0.1, "be")], axis=-1)
        elif op == "gelu":
            t = b.node("Div", [x, b.const(np.array(np.sqrt(2.0)), "s")])
            t = b.node("Erf", [t])
            t = b.node("Add", [t, b.const(np.array(1.0), "one")])
            t = b.node("Mul", [x, t])
            x = b.node("Mul", [t, b.const(np.array(0.5), "half")])
        elif op == "add_const":
            x = b.node("Add", [x, b.const(rng.standard_normal(D) * scale, "a")])
        elif op == "mul_branch":
            same = [t for t, d in toks if d == D and t != x]
            if same:
                x = b.node("Mul", [x, same[-1]])
        elif op == "add_branch":
            same = [t for t, d in toks if d == D and t != x]
            if same:
                x = b.node("Add", [x, same[-1]])
        elif op == "transpose_matmul":  # attention-like x @ x^T then @ x
            xt = b.node("Transpose", [x], perm=[0, 2, 1])
            s = b.node("MatMul", [x, xt])
            p = b.node("Softmax", [b.node("Mul", [s, b.const(np.array(1.0 / np.sqrt(D)), "sc")])], axis=-1)
            x = b.node("MatMul", [p, x])
        elif op == "relu":
            x = b.node("Relu", [x])
        toks.append((x, D))
    out = b.node("Identity", [x])
    g = helper.make_graph(b.nodes, "fuzz", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, L, D])], initializer=b.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


graphs = st.fixed_dictionaries({
    "ops": st.lists(st.sampled_from(sorted(set(OPS_4D) | set(OPS_3D))), min_size=1, max_size=8),
    "seed": st.integers(0, 2**31 - 1),
    "channels": st.integers(1, 6),
    "size": st.sampled_from([2, 3, 4, 6]),
    "scale": st.sampled_from([0.05, 1.0, 8.0]),
    "level": st.sampled_from(["O0", "O3"]),
})


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(case=graphs)
def test_random_graphs_simulate_like_the_quantized_model(case, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")
    model = build_graph(case["ops"], case["seed"], case["channels"], case["size"], case["scale"])
    onnx.save(model, tmp / "m.onnx")
    cfg = config_from_dict({
        "model_parameters": {"onnx_model": str(tmp / "m.onnx"), "working_dir": str(tmp / "wd"), "output_model_file_prefix": "m"},
        "input_parameters": {"input_name": "x", "input_shape": f"1x{case['channels']}x{case['size']}x{case['size']}",
                             "input_type_train": "featuremap", "input_type_rt": "featuremap", "input_layout_train": "NCHW",
                             "norm_type": "no_preprocess"},
        "calibration_parameters": {"calibration_type": "skip", "num_samples": 4},
        "compiler_parameters": {"optimize_level": case["level"]},
    }, base_dir=tmp)
    result = run_calibration(cfg)
    write_outputs(cfg, result, "")
    compiled = compile_model(cfg)
    ex = Executor(from_bytes(compiled.data))
    sess = ort.InferenceSession(str(tmp / "wd" / "m_quantized_model.onnx"), providers=["CPUExecutionProvider"])
    scales = {o["name"]: (o.get("dequantize") or {}).get("scale") for o in compiled.header["outputs"]}
    rng = np.random.default_rng(case["seed"])
    for _ in range(2):
        x = (rng.standard_normal((1, case["channels"], case["size"], case["size"])) * 3).astype(np.float32)
        got = ex.run({"x": x})
        ref = sess.run(None, {"x": x})
        for name, r in zip(ex.output_names, ref):
            lsb = scales.get(name) or 1e-6
            diff = np.abs(got[name].astype(np.float64) - r.astype(np.float64)) / lsb
            assert np.array_equal(got[name], r), (case, name, float(diff.max()))
