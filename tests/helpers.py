"""Small model builders and comparisons shared by the tests."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from hbtool.ir.graph import Graph
from hbtool.ir.onnx_export import to_onnx


def run_ort(model: onnx.ModelProto | str | Path, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    return sess.run(None, dict(feeds))


def max_rel_err(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-12))


def assert_graph_matches(original: onnx.ModelProto | str | Path, graph: Graph, feeds: Mapping[str, np.ndarray], tol: float = 1e-4) -> None:
    """The IR, exported, computes what the original model computes (relative max error)."""
    ref = run_ort(original, feeds)
    got = run_ort(to_onnx(graph), feeds)
    assert len(ref) == len(got)
    for r, g in zip(ref, got):
        assert r.shape == g.shape
        assert max_rel_err(r, g) <= tol, max_rel_err(r, g)


def make_model(nodes, inputs, outputs, initializers=(), opset: int = 17, functions=()) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], functions=list(functions))
    model.ir_version = 8
    return model


def tensor(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def vinfo(name: str, shape, elem=TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def small_conv_model(channels: int = 8, opset: int = 17, extra_nodes=(), tail: str = "y") -> onnx.ModelProto:
    """input (1,3,16,16) -> Conv(3->channels, 3x3) -> Relu -> y (plus optional nodes)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((channels, 3, 3, 3)).astype(np.float32) * 0.2
    b = rng.standard_normal(channels).astype(np.float32) * 0.1
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y" if not extra_nodes else "r"], name="relu"),
        *extra_nodes,
    ]
    return make_model(nodes, [vinfo("x", [1, 3, 16, 16])], [vinfo(tail, [1, channels, 16, 16])], [tensor("w", w), tensor("b", b)], opset)


def run_pipeline(model: onnx.ModelProto, tmp: Path, input_shape, seed: int = 0, samples: int = 8, node_info: dict | None = None,
                 calibration: dict | None = None):
    """calibrate -> compile -> simulate a one-input featuremap model on random data (``node_info``: the YAML key;
    ``calibration``: extra calibration_parameters keys).

    Returns ``(calibration, compiled, feeds, simulated, quantized_onnx_outputs, float_outputs)``
    where the three output lists are per example, each a list in output order.
    """
    from hbtool.compiler.artifact import from_bytes
    from hbtool.compiler.compile import compile_model
    from hbtool.config import config_from_dict
    from hbtool.quant.calibrate import run_calibration, write_outputs
    from hbtool.simulator.executor import Executor

    tmp = Path(tmp)
    onnx.save(model, tmp / "m.onnx")
    name = model.graph.input[0].name
    inputs = {"input_name": name, "input_shape": "x".join(map(str, input_shape)), "input_type_train": "featuremap",
              "input_type_rt": "featuremap", "norm_type": "no_preprocess"}
    cfg = config_from_dict({
        "model_parameters": {"onnx_model": str(tmp / "m.onnx"), "working_dir": str(tmp / "wd"), "output_model_file_prefix": "m",
                             **({"node_info": node_info} if node_info else {})},
        "input_parameters": inputs,
        "calibration_parameters": {"calibration_type": "skip", "num_samples": samples, **(calibration or {})},
    }, base_dir=tmp)
    calibration = run_calibration(cfg)
    write_outputs(cfg, calibration, "")
    compiled = compile_model(cfg)
    executor = Executor(from_bytes(compiled.data))
    quantized = str(tmp / "wd" / "m_quantized_model.onnx")
    rng = np.random.default_rng(seed)
    feeds, simulated, quantized_out, float_out = [], [], [], []
    for _ in range(2):
        feed = {name: rng.standard_normal(tuple(input_shape)).astype(np.float32)}
        got = executor.run(feed)
        feeds.append(feed)
        simulated.append([got[o] for o in executor.output_names])
        quantized_out.append(run_ort(quantized, feed))
        float_out.append(run_ort(model, feed))
    return calibration, compiled, feeds, simulated, quantized_out, float_out


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-30))


def featuremap_config(tmp: Path, model: onnx.ModelProto | Path, samples=None, working_dir: str = "wd", prefix: str = "m",
                      **overrides):
    """The config of a featuremap model without preprocessing, through ``hbtool.api.load_config``.

    ``model``: a ModelProto (saved as ``tmp/<prefix>.onnx`` unless there) or a path; its inputs and
    their shapes come from the model. ``samples``: a list of ``{input: array}`` written as ``.npy``
    folders under ``tmp/cal_<k>`` and named in ``cal_data_dir`` (None: no folder). ``overrides``:
    config keys, dotted (``**{"calibration_parameters.calibration_type": "max"}``) or nested by group.
    """
    from hbtool import api

    if isinstance(model, onnx.ModelProto):
        path = tmp / f"{prefix}.onnx"
        if not path.exists():
            onnx.save(model, path)
        model = onnx.load(str(path), load_external_data=False)
    else:
        path = Path(model)
        model = onnx.load(str(path), load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    inputs = [(vi.name, [d.dim_value for d in vi.type.tensor_type.shape.dim]) for vi in model.graph.input if vi.name not in inits]
    cal: dict = {}
    if samples is not None:
        folders = []
        for k, (name, _) in enumerate(inputs):
            folder = tmp / f"cal_{k}"
            if not folder.exists():
                folder.mkdir()
                for j, sample in enumerate(samples):
                    np.save(folder / f"{j:05d}.npy", sample[name])
            folders.append(str(folder))
        cal["cal_data_dir"] = ";".join(folders)
    data = {
        "model_parameters": {"onnx_model": str(path), "working_dir": str(tmp / working_dir), "output_model_file_prefix": prefix},
        "input_parameters": {"input_name": ";".join(n for n, _ in inputs),
                             "input_shape": ";".join("x".join(str(d) for d in s) for _, s in inputs),
                             "input_type_train": ";".join(["featuremap"] * len(inputs)),
                             "input_type_rt": ";".join(["featuremap"] * len(inputs)),
                             "norm_type": ";".join(["no_preprocess"] * len(inputs))},
        "calibration_parameters": cal,
    }
    return api.load_config(data, overrides=overrides or None, base_dir=tmp)


def save_conv_then_scalars_model(path: Path, after_conv, scalars, seed: int, name: str) -> Path:
    """Save ``input (1, 3, 32, 32) -> Conv(3 -> 4, 3 x 3, "c") -> after_conv -> output (1, 4, 32, 32)``, the tiny CNN's
    input, with one-element constants ``s1, b1, s2, b2, ...`` from the ``(s, b)`` pairs ``scalars``: the small
    programs of the simulator's elementwise-fusion tests. Returns ``path``."""
    rng = np.random.default_rng(seed)
    inits = [tensor("w", rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32))]
    for k, (s, b) in enumerate(scalars, 1):
        inits += [tensor(f"s{k}", np.array([s], np.float32)), tensor(f"b{k}", np.array([b], np.float32))]
    nodes = [helper.make_node("Conv", ["input", "w"], ["c"], pads=[1, 1, 1, 1]), *after_conv]
    graph = helper.make_graph(nodes, name, [vinfo("input", [1, 3, 32, 32])], [vinfo("output", [1, 4, 32, 32])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def compile_like_tiny_cnn(tmp: Path, onnx_model: Path, prefix: str):
    """``hbtool compile`` of ``onnx_model`` with the bundled tiny CNN's config (its 8 digit images for calibration),
    working in ``tmp/wd``; the artifact it wrote, read back. For tests that need a real compiled program of a small
    model whose input is the tiny CNN's (1 x 3 x 32 x 32)."""
    import yaml
    from click.testing import CliRunner

    from hbtool.cli import main
    from hbtool.compiler.artifact import read_artifact

    root = Path(__file__).resolve().parents[1]
    data = yaml.safe_load((root / "configs" / "tiny_cnn.yaml").read_text())
    data["model_parameters"].update(onnx_model=str(onnx_model), working_dir=str(tmp / "wd"), output_model_file_prefix=prefix)
    data["calibration_parameters"].update(cal_data_dir=str(root / "samples" / "data" / "digits_cal"), num_samples=8)
    cfg = tmp / f"{prefix}.yaml"
    cfg.write_text(yaml.safe_dump(data))
    r = CliRunner().invoke(main, ["compile", "-c", str(cfg)])
    assert r.exit_code == 0, r.output
    return read_artifact(tmp / "wd" / f"{prefix}.bin")


def tiny_calibration_config(folder: Path, model: str = "tiny_swin", **calibration) -> Path:
    """A config file in ``folder`` for one of the repository's tiny models (``configs/<model>.yaml``) calibrated on
    the bundled digits, its working directory ``folder / "wd"``; ``calibration`` overrides calibration_parameters."""
    import yaml

    root = Path(__file__).resolve().parents[1]
    data = yaml.safe_load((root / "configs" / f"{model}.yaml").read_text())
    data["model_parameters"]["onnx_model"] = str(root / "samples" / "tiny" / f"{model}.onnx")
    data["model_parameters"]["working_dir"] = str(folder / "wd")
    data["calibration_parameters"]["cal_data_dir"] = str(root / "samples" / "data" / "digits_cal")
    data["calibration_parameters"].update(calibration)
    path = folder / "cfg.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def edge_codes(rng: np.random.Generator, shape, bits: int) -> np.ndarray:
    """Random signed ``bits``-bit integer codes of ``shape`` whose first elements are the edges (the minimum, the
    maximum, 0, -1), so that saturation and rounding at the ends show in a bit-exact comparison."""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    x = rng.integers(lo, hi + 1, size=shape)
    flat = x.reshape(-1)
    k = min(4, flat.size)
    flat[:k] = [lo, hi, 0, -1][:k]
    return x



def random_depthwise_layer(rng: np.random.Generator, channels: int, mult: int, kernel_hw, plane_hw, *, strides, pads,
                           dilations=(1, 1), in_bits: int, roundings):
    """A random depthwise Conv kernel (``mult`` output channels per input channel) and a batch of 1-3 input planes,
    for the bit-exact tests of the simulator's depthwise routes: weights all at one end of their range in 3 layers of
    10 (every product at its largest), a bias in 7 of 10, per-channel scales, ReLU in half, 8- or 16-bit outputs, any
    of ``roundings``; the codes at both ends of their range first, and a whole batch at one end in 1 of 5."""
    from hbtool.kernels import Conv

    cout = channels * mult
    w = rng.integers(-128, 128, size=(cout, 1, *kernel_hw))
    if rng.random() < 0.3:
        w[:] = rng.choice([127, -128])
    bias = rng.integers(-5000, 5000, cout) if rng.random() < 0.7 else None
    kern = Conv.build(w, bias, 0.03, rng.uniform(0.001, 0.02, cout), float(rng.uniform(0.05, 2.0)), strides=list(strides),
                      pads=list(pads), dilations=list(dilations), group=channels, in_bits=in_bits,
                      out_bits=int(rng.choice([8, 16])), relu=bool(rng.random() < 0.5), rounding=str(rng.choice(roundings)))
    lo, hi = -(1 << (in_bits - 1)), (1 << (in_bits - 1)) - 1
    x = rng.integers(lo, hi + 1, size=(int(rng.integers(1, 4)), channels, *plane_hw))
    x.reshape(-1)[: min(4, x.size)] = [lo, hi, lo, hi][: min(4, x.size)]
    if rng.random() < 0.2:
        x[:] = rng.choice([lo, hi])
    return kern, x
