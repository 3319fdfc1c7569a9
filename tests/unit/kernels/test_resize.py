"""Resize on the BPU: nearest as data movement of the codes, bilinear as an integer kernel.

* the source indices of nearest Resize against onnxruntime's float Resize, for every coordinate
  transformation, every nearest_mode, odd sizes, integer and non-integer scales and ``sizes``;
* the bilinear kernel: numpy form == ONNX form bit for bit on random int8/int16 codes for every
  coordinate mode, and within its stated bound (1/2 LSB + weight quantization) of float Resize;
* small detector/segmenter necks through checker -> calibrate -> compile -> simulate: the
  Resize on the BPU, no float fallback, one BPU subgraph, simulate == the quantized ONNX model
  bit for bit, cosine to the float model above 0.999;
* the perf cost: nearest on the data-movement unit, bilinear on the vector unit at 4 taps per
  output element.
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from hbtool.checker.run import run_checker
from hbtool.compiler.artifact import from_bytes
from hbtool.compiler.compile import compile_model
from hbtool.config import config_from_dict
from hbtool.ir.graph import Graph, Node
from hbtool.kernels.resize import COORDINATE_MODES, NEAREST_MODES, WEIGHT_BITS, BilinearResize, axis_scales
from hbtool.march import op_rules
from hbtool.quant.calibrate import run_calibration, write_outputs
from hbtool.io.metrics import cosine
from hbtool.costmodel.schedule import estimate
from hbtool.simulator.executor import Executor
from hbtool.kernels.movement import MOVEMENT

F32 = np.float32
# (input H, W), and either float scales for H and W or output sizes (H, W)
GEOMETRIES = [
    ((5, 6), (2.0, 2.0), None), ((7, 4), None, (3, 9)), ((20, 20), None, (32, 32)), ((4, 5), (1.75, 1.5), None),
    ((6, 9), (0.7, 0.5), None), ((3, 3), (3.0, 3.0), None), ((9, 7), None, (13, 11)), ((13, 8), None, (5, 1)),
    ((4, 6), (1.0, 2.0), None), ((5, 5), None, (5, 8)),
]


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _resize_model(shape, scales, sizes, opset: int = 17, **attrs) -> onnx.ModelProto:
    if sizes is not None:
        inits = [numpy_helper.from_array(np.array([shape[0], shape[1], *sizes], np.int64), "sizes")]
        ins = ["x", "", "", "sizes"]
    else:
        inits = [numpy_helper.from_array(np.array([1, 1, *scales], F32), "scales")]
        ins = ["x", "", "scales"]
    node = helper.make_node("Resize", ins, ["y"], name="resize", **attrs)
    g = helper.make_graph([node], "r", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _program_resize(shape, out_shape, scales, sizes, **attrs) -> tuple[Graph, Node]:
    g = Graph("p", 17)
    g.set_value("x", shape, np.float64)
    g.set_value("y", out_shape, np.float64)
    ins = ["x", "", ""]
    if sizes is not None:
        g.add_const(np.array([shape[0], shape[1], *sizes], np.int64), name="sizes")
        ins.append("sizes")
    else:
        g.add_const(np.array([1, 1, *scales], F32), name="scales")
        ins[2] = "scales"
    return g, g.add_node("Resize", ins, ["y"], dict(attrs), name="resize")


# ------------------------------------------------------------------ nearest: source indices
def test_nearest_indices_match_onnxruntime_for_every_mode_and_geometry():
    rng = np.random.default_rng(0)
    checked = 0
    for coords, rounding, (hw, scales, sizes) in itertools.product(COORDINATE_MODES, NEAREST_MODES, GEOMETRIES):
        shape = (1, 2, *hw)
        x = rng.standard_normal(shape).astype(F32)
        ref = _session(_resize_model(shape, scales, sizes, mode="nearest", coordinate_transformation_mode=coords,
                                     nearest_mode=rounding)).run(None, {"x": x})[0]
        g, node = _program_resize(shape, ref.shape, scales, sizes, mode="nearest",
                                  coordinate_transformation_mode=coords, nearest_mode=rounding)
        got = MOVEMENT["Resize"](node, g, x)[0]
        assert got.shape == ref.shape and np.array_equal(got, ref), (coords, rounding, hw, scales, sizes)
        checked += 1
    assert checked == len(COORDINATE_MODES) * len(NEAREST_MODES) * len(GEOMETRIES)
    # the checker lets through exactly the coordinate rules the integer forms compute
    assert op_rules.RESIZE_COORDINATE_MODES == COORDINATE_MODES


def test_nearest_moves_integer_codes_unchanged():
    x = np.arange(2 * 3 * 5, dtype=np.int64).reshape(1, 2, 3, 5) - 15
    g, node = _program_resize(x.shape, (1, 2, 6, 10), (2.0, 2.0), None, mode="nearest")
    y = MOVEMENT["Resize"](node, g, x)[0]
    assert y.dtype == np.int64 and set(np.unique(y)) == set(np.unique(x))
    assert np.array_equal(y, x.repeat(2, axis=2).repeat(2, axis=3))


# ------------------------------------------------------------------ bilinear kernel
@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("coords", COORDINATE_MODES)
def test_bilinear_numpy_form_equals_onnx_form_and_float_resize(coords, bits):
    rng = np.random.default_rng(bits)
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    for (h, w), scales, sizes in GEOMETRIES:
        shape = (1, 3, h, w)
        out_hw = sizes if sizes is not None else tuple(int(np.floor(n * np.float32(s))) for n, s in zip((h, w), scales))
        per_axis = axis_scales((h, w), out_hw, scales)
        kernel = BilinearResize.build((h, w), out_hw, per_axis, coords, bits, rounding="half_even")
        q = rng.integers(lo, hi + 1, shape)
        q[0, 0, 0, 0], q[0, 0, -1, -1] = lo, hi  # full-scale corners
        got = kernel.apply_numpy(q)
        onnx_form = _session(kernel.onnx_model([list(shape)])).run(None, {"x0": q.astype(np.float64)})[0]
        assert np.array_equal(got, onnx_form), (coords, bits, (h, w))
        assert got.min() >= lo and got.max() <= hi
        ref = _session(_resize_model(shape, scales, sizes, mode="linear", coordinate_transformation_mode=coords)
                       ).run(None, {"x": q.astype(F32)})[0].astype(np.float64)
        # per axis: weight error <= 2**-(k+1) times the neighbour jump; the rounding shift adds 1/2
        jump_h = np.abs(np.diff(q, axis=2)).max(initial=0)
        jump_w = np.abs(np.diff(q, axis=3)).max(initial=0)
        bound = 0.5 + 2.0 ** -(WEIGHT_BITS + 1) * (jump_h + jump_w) + 1e-3 * max(1, hi / 127)
        err = np.abs(got - ref).max()
        assert err <= bound, (coords, bits, (h, w), err, bound)


def test_bilinear_kernel_rounds_to_nearest_not_down():
    # a broken kernel that truncates (floor) or drops a tap is off by up to 1 LSB on this ramp
    kernel = BilinearResize.build((1, 4), (1, 8), (F32(1), F32(2)), "half_pixel", 8)
    q = np.array([[[[0, 1, 2, 3]]]])
    assert kernel.apply_numpy(q).tolist() == [[[[0, 0, 1, 1, 2, 2, 3, 3]]]]  # 0.25 -> 0, 0.75 -> 1, ...
    q = np.array([[[[0, 100, 0, -100]]]])
    assert kernel.apply_numpy(q).tolist() == [[[[0, 25, 75, 75, 25, -25, -75, -100]]]]


# ------------------------------------------------------------------ pipeline models
def _conv(rng, name, x, y, cin, cout) -> tuple[onnx.NodeProto, list[onnx.TensorProto]]:
    w = (rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(9 * cin)).astype(F32)
    b = (rng.standard_normal(cout) * 0.1).astype(F32)
    node = helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [y], name=name, pads=[1, 1, 1, 1])
    return node, [numpy_helper.from_array(w, f"{name}_w"), numpy_helper.from_array(b, f"{name}_b")]


def neck_model(mode: str, coords: str, hw=(8, 8), scales=(2.0, 2.0), sizes=None, skip_add: bool = False,
               nearest_mode: str = "round_prefer_floor") -> onnx.ModelProto:
    """conv -> relu -> Resize -> [+ conv(x resized by a stride-1 path)] -> conv: a YOLO neck / FPN / UNet step."""
    rng = np.random.default_rng(7)
    c = 4
    nodes, inits = [], []
    n, i = _conv(rng, "c1", "x", "c1", 3, c)
    nodes += [n, helper.make_node("Relu", ["c1"], ["r1"], name="relu1")]
    inits += i
    out_hw = tuple(sizes) if sizes is not None else tuple(int(np.floor(d * s)) for d, s in zip(hw, scales))
    if sizes is not None:
        inits.append(numpy_helper.from_array(np.array([1, c, *sizes], np.int64), "rs_sizes"))
        ins = ["r1", "", "", "rs_sizes"]
    else:
        inits.append(numpy_helper.from_array(np.array([1, 1, *scales], F32), "rs_scales"))
        ins = ["r1", "", "rs_scales"]
    attrs = dict(mode=mode, coordinate_transformation_mode=coords)
    if mode == "nearest":
        attrs["nearest_mode"] = nearest_mode
    nodes.append(helper.make_node("Resize", ins, ["up"], name="resize", **attrs))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, *hw])]
    head = "up"
    if skip_add:  # the lateral (skip) branch at the higher resolution
        inputs.append(helper.make_tensor_value_info("skip", TensorProto.FLOAT, [1, 3, *out_hw]))
        n, i = _conv(rng, "lat", "skip", "lat", 3, c)
        nodes += [n, helper.make_node("Add", ["up", "lat"], ["sum"], name="add")]
        inits += i
        head = "sum"
    n, i = _conv(rng, "c2", head, "y", c, 5)
    nodes.append(n)
    inits += i
    g = helper.make_graph(nodes, "neck", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, *out_hw])],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def torch_interpolate_model(tmp_path, opset: int, mode: str):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    class Neck(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.c1, self.c2 = torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.Conv2d(4, 5, 3, padding=1)

        def forward(self, x):
            y = torch.relu(self.c1(x))
            kw = {"align_corners": False} if mode == "bilinear" else {}
            return self.c2(F.interpolate(y, scale_factor=2, mode=mode, **kw))

    path = tmp_path / f"torch_{mode}_{opset}.onnx"
    torch.onnx.export(Neck().eval(), torch.randn(1, 3, 8, 8), str(path), opset_version=opset, input_names=["x"],
                      output_names=["y"], dynamo=False)
    return onnx.load(str(path))


def run_pipeline(tmp_path, model: onnx.ModelProto, level: str = "O3", node_info: dict | None = None):
    """checker -> calibrate (random data) -> compile -> simulate; returns what the tests assert on."""
    onnx.save(model, tmp_path / "m.onnx")
    checked = run_checker(tmp_path / "m.onnx", output_dir=tmp_path / "chk", write_files=False)
    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    cfg = config_from_dict({
        "model_parameters": {"onnx_model": str(tmp_path / "m.onnx"), "working_dir": str(tmp_path / "wd"),
                             "output_model_file_prefix": "m", "node_info": node_info or {}},
        "input_parameters": {"input_name": ";".join(shapes), "input_shape": ";".join("x".join(map(str, s)) for s in shapes.values()),
                             "input_type_train": ";".join(["featuremap"] * len(shapes)),
                             "input_type_rt": ";".join(["featuremap"] * len(shapes)),
                             "input_layout_train": ";".join(["NCHW"] * len(shapes)),
                             "norm_type": ";".join(["no_preprocess"] * len(shapes))},
        "calibration_parameters": {"calibration_type": "skip", "num_samples": 8},
        "compiler_parameters": {"optimize_level": level},
    }, base_dir=tmp_path)
    write_outputs(cfg, run_calibration(cfg), "")
    compiled = compile_model(cfg)
    ex = Executor(from_bytes(compiled.data))
    quantized = ort.InferenceSession(str(tmp_path / "wd" / "m_quantized_model.onnx"), providers=["CPUExecutionProvider"])
    floating = _session(model)
    rng = np.random.default_rng(1)
    feeds = {k: rng.standard_normal(s).astype(F32) for k, s in shapes.items()}
    sim = ex.run(feeds)["y"]
    q = quantized.run(["y"], feeds)[0]
    f = floating.run(["y"], feeds)[0]
    return checked, compiled, sim, q, f


def _assert_on_bpu_and_exact(checked, compiled, sim, q, f, kernel_unit: str):
    resize = [n for n in checked.graph.nodes if n.op_type == "Resize"]
    assert [(n.meta["on"], n.meta["bpu_type"]) for n in resize] == [("BPU", "HzResize")]
    assert checked.summary["subgraphs"] == 1
    assert compiled.fallbacks == []
    prog = [n for n in compiled.program.nodes if n.name == "resize"]
    assert [n.meta["unit"] for n in prog] == [kernel_unit]
    assert {n.meta.get("subgraph") for n in compiled.program.nodes if n.meta.get("on") == "BPU"} == {0}
    assert np.array_equal(sim, q)
    assert cosine(f, sim) > 0.999, cosine(f, sim)
    (op,) = [o for o in estimate(from_bytes(compiled.data).header).ops if o.name == "resize"]
    assert op.unit == kernel_unit and op.cycles > 0
    # nearest: the cost model replays the movement's source indices (a copy would read 'sequential copy')
    assert ": runs of" in op.note and op.layout if kernel_unit == "data_movement" else "4 taps" in op.note


NECKS = {
    "nearest_x2_yolo": (dict(mode="nearest", coords="asymmetric", nearest_mode="floor"), "data_movement"),
    "nearest_half_pixel_x2": (dict(mode="nearest", coords="half_pixel"), "data_movement"),
    "bilinear_half_pixel_x2_fpn_add": (dict(mode="linear", coords="half_pixel", skip_add=True), "vector"),
    "bilinear_align_corners": (dict(mode="linear", coords="align_corners", hw=(7, 9), scales=(2.0, 2.0)), "vector"),
    "bilinear_pytorch_half_pixel_sizes_20_to_32": (dict(mode="linear", coords="pytorch_half_pixel", hw=(20, 20), sizes=(32, 32)), "vector"),
    "nearest_sizes_20_to_32": (dict(mode="nearest", coords="asymmetric", hw=(20, 20), sizes=(32, 32), nearest_mode="floor"), "data_movement"),
}


@pytest.mark.parametrize("case", list(NECKS))
def test_resize_neck_runs_on_the_bpu_bit_exact(tmp_path, case):
    kwargs, unit = NECKS[case]
    _assert_on_bpu_and_exact(*run_pipeline(tmp_path, neck_model(**kwargs)), kernel_unit=unit)


@pytest.mark.parametrize("case", ["nearest_x2_yolo", "bilinear_half_pixel_x2_fpn_add"])
def test_resize_neck_without_program_passes(tmp_path, case):
    kwargs, unit = NECKS[case]
    _assert_on_bpu_and_exact(*run_pipeline(tmp_path, neck_model(**kwargs), level="O0"), kernel_unit=unit)


@pytest.mark.parametrize("case", ["nearest_sizes_20_to_32", "bilinear_align_corners"])
def test_int16_resize_neck(tmp_path, case):
    kwargs, unit = NECKS[case]
    result = run_pipeline(tmp_path, neck_model(**kwargs), node_info={"resize": {"InputType": "int16", "OutputType": "int16"}})
    _assert_on_bpu_and_exact(*result, kernel_unit=unit)
    (node,) = [n for n in result[1].program.nodes if n.name == "resize"]
    assert result[1].header["tensors"][node.outputs[0]]["element_bytes"] == 2


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch's legacy exporter, the one that writes opset 11
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_torch_interpolate_exports_run_on_the_bpu(tmp_path, opset, mode):
    checked, compiled, sim, q, f = run_pipeline(tmp_path, torch_interpolate_model(tmp_path, opset, mode))
    resize = [n for n in checked.graph.nodes if n.op_type == "Resize"]
    assert [(n.meta["on"], n.meta["bpu_type"]) for n in resize] == [("BPU", "HzResize")]
    assert checked.summary["subgraphs"] == 1 and compiled.fallbacks == []
    units = [n.meta["unit"] for n in compiled.program.nodes if n.meta.get("source_op", n.op_type) == "Resize"]
    assert units == ["data_movement" if mode == "nearest" else "vector"]
    assert np.array_equal(sim, q)
    assert cosine(f, sim) > 0.999, cosine(f, sim)


def test_cubic_resize_runs_on_the_cpu_with_the_reason(tmp_path):
    model = neck_model(mode="nearest", coords="half_pixel")
    for node in model.graph.node:
        if node.op_type == "Resize":
            for a in node.attribute:
                if a.name == "mode":
                    a.s = b"cubic"
    onnx.save(model, tmp_path / "m.onnx")
    checked = run_checker(tmp_path / "m.onnx", output_dir=tmp_path / "chk", write_files=False)
    (resize,) = [n for n in checked.graph.nodes if n.op_type == "Resize"]
    assert resize.meta["on"] == "CPU"
    assert "cubic interpolation runs on the CPU" in resize.meta["reason"] and "(mode cubic)" in resize.meta["reason"]
    assert checked.summary["subgraphs"] == 2  # the CPU node splits the two convolutions


# ------------------------------------------------------------------ perf
def test_perf_costs_nearest_as_data_movement_and_bilinear_as_four_taps_on_the_vector_unit():
    from hbtool.costmodel.cost import BILINEAR_TAPS, DATA_MOVEMENT, VECTOR
    from tests.unit.perf.test_op_costs_schedule_and_cli import HW, cost, node, tiny_program

    shapes = {"x": (1, 16, 8, 8), "y": (1, 16, 16, 16)}
    g, tensors = tiny_program(shapes, [node("Resize", ["x", "", "s"], ["y"], DATA_MOVEMENT, attrs={"mode": "nearest"})])
    g.add_const(np.array([1, 1, 2, 2], F32), name="s")
    near = cost(g, tensors)
    out_bytes = tensors["y"]["padded_bytes"]
    assert near.unit == DATA_MOVEMENT and near.elements == 16 * 16 * 16
    assert near.components[DATA_MOVEMENT] >= out_bytes / HW.dm_bytes_per_cycle

    kernel = BilinearResize.build((8, 8), (16, 16), (F32(2), F32(2)), "half_pixel", 8)
    g, tensors = tiny_program(shapes, [node("HzResize", ["x"], ["y"], VECTOR, kernel=kernel)])
    bil = cost(g, tensors)
    padded_out = int(np.prod(tensors["y"]["padded"]))
    assert bil.unit == VECTOR and bil.elements == BILINEAR_TAPS * padded_out
    assert bil.components[VECTOR] == pytest.approx(BILINEAR_TAPS * padded_out * HW.cpe_elementwise / HW.vector_lanes)
    assert "4 taps" in bil.note


def test_opset9_upsample_is_refused_at_import_not_lifted_to_another_resize():
    """onnx's version converter turns Upsample-9 into a Resize keeping only ``mode`` (half_pixel at
    opset 17), which changes a linear Upsample at every scale and a nearest one at non-integer
    scales; the importer reads opsets from 11, so such a model stops with the fix instead."""
    from hbtool.errors import HbError
    from hbtool.ir import import_onnx

    node = helper.make_node("Upsample", ["x", "s"], ["y"], mode="linear")
    g = helper.make_graph([node], "u", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=[numpy_helper.from_array(np.array([1, 1, 2, 2], F32), "s")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])
    m.ir_version = 7
    with pytest.raises(HbError, match="opset 9"):
        import_onnx(m)
