"""Property test of the 4-bit path: random CNNs calibrated with ``default_precision: int4`` compile and
simulate exactly like their quantized ONNX model (bit for bit), with uint4 and int4 nodes in them.

Each graph starts conv -> relu and ends conv -> relu -> conv -> relu -> global-average-pool -> Gemm,
so at least one conv is eligible; the middle chains convolutions (stride 1 and 2, with and without ReLU: uint4
and int4 inputs), max pools, residual adds and concats in random order. ``FUZZ_INT4_EXAMPLES``
sets the number of examples (default 20).
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

EXAMPLES = int(os.environ.get("FUZZ_INT4_EXAMPLES", "20"))
OPS = ("conv_relu", "conv", "conv_s2_relu", "maxpool", "add_branch", "concat_self")


def build(ops: list[str], seed: int, channels: int, size: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes, inits, k = [], [], [0]

    def name(h: str) -> str:
        k[0] += 1
        return f"{h}_{k[0]}"

    def const(a: np.ndarray) -> str:
        n = name("c")
        inits.append(numpy_helper.from_array(np.asarray(a, np.float32), n))
        return n

    def node(op: str, inputs: list[str], **attrs) -> str:
        out = name(op.lower())
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv(x: str, cin: int, cout: int, stride: int = 1) -> str:
        w = rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(9 * cin)
        return node("Conv", [x, const(w), const(rng.standard_normal(cout) * 0.1)], pads=[1, 1, 1, 1], strides=[stride, stride])

    c, h = int(rng.integers(4, 9)), size
    x = node("Relu", [conv("x", channels, c)])
    earlier = [(x, c, h)]
    for op in ops:
        if op in ("conv_relu", "conv"):
            co = int(rng.integers(2, 9))
            x = conv(x, c, co)
            if op == "conv_relu":
                x = node("Relu", [x])
            c = co
        elif op == "conv_s2_relu" and h >= 4:
            co = int(rng.integers(2, 9))
            x = node("Relu", [conv(x, c, co, 2)])
            c, h = co, (h + 1) // 2
        elif op == "maxpool" and h >= 2:
            x = node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
            h //= 2
        elif op == "add_branch":
            same = [t for t, cc, hh in earlier if (cc, hh) == (c, h) and t != x]
            if same:
                x = node("Relu", [node("Add", [x, same[-1]])])
        elif op == "concat_self":
            x = node("Concat", [x, node("Relu", [x])], axis=1)
            c *= 2
        earlier.append((x, c, h))
    x = node("Relu", [conv(x, c, 6)])
    x = conv(x, 6, 8)  # always one conv with a 4-bit-eligible (conv + relu) input before the head
    x = node("Relu", [x])
    x = node("Flatten", [node("GlobalAveragePool", [x])])
    n = int(rng.integers(2, 11))
    y = node("Gemm", [x, const(rng.standard_normal((n, 8)) / np.sqrt(8)), const(rng.standard_normal(n) * 0.1)], transB=1)
    g = helper.make_graph(nodes, "fuzz4", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
                          [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, n])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


cases = st.fixed_dictionaries({
    "ops": st.lists(st.sampled_from(OPS), min_size=0, max_size=6),
    "seed": st.integers(0, 2**31 - 1),
    "channels": st.integers(1, 4),
    "size": st.sampled_from([4, 6, 8]),
    "level": st.sampled_from(["O0", "O3"]),
})


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(case=cases)
def test_random_int4_cnns_simulate_bit_for_bit(case, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz4")
    onnx.save(build(case["ops"], case["seed"], case["channels"], case["size"]), tmp / "m.onnx")
    cfg = config_from_dict({
        "model_parameters": {"onnx_model": str(tmp / "m.onnx"), "working_dir": str(tmp / "wd"), "output_model_file_prefix": "m"},
        "input_parameters": {"input_name": "x", "input_shape": f"1x{case['channels']}x{case['size']}x{case['size']}",
                             "input_type_train": "featuremap", "input_type_rt": "featuremap", "input_layout_train": "NCHW",
                             "norm_type": "no_preprocess"},
        "calibration_parameters": {"calibration_type": "skip", "num_samples": 4, "default_precision": "int4"},
        "compiler_parameters": {"optimize_level": case["level"]},
    }, base_dir=tmp)
    result = run_calibration(cfg)
    write_outputs(cfg, result, "")
    art = from_bytes(compile_model(cfg).data)
    kernels = [n["meta"]["kernel"] for n in art.header["program"]["nodes"] if "kernel" in (n.get("meta") or {})]
    four = [k for k in kernels if getattr(k, "weight_bits", 8) == 4]
    assert four and all(k.input_range in ((0, 15), (-8, 7)) for k in four), (case, result.options.get("int4"))
    ex = Executor(art)
    sess = ort.InferenceSession(str(tmp / "wd" / "m_quantized_model.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(case["seed"])
    for _ in range(2):
        x = (rng.standard_normal((1, case["channels"], case["size"], case["size"])) * 2).astype(np.float32)
        got = ex.run({"x": x})
        ref = sess.run(None, {"x": x})
        for name, r in zip(ex.output_names, ref):
            assert np.array_equal(got[name], r), (case, float(np.abs(got[name] - r).max()))
