"""Checks of samples/: architectures, export, tiny trained models and data, configs, wart models."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from samples import architectures, tiny, warts  # noqa: E402
from samples.export import export_model  # noqa: E402

# --------------------------------------------------------------------------------------------
# architectures

# parameter counts reported by the papers / reference implementations
PAPER_PARAMS = {"resnet50": 25.6e6, "efficientnet_lite4": 13.0e6, "swin_t": 28.3e6, "deit_tiny": 5.7e6}


@pytest.mark.parametrize("name", sorted(PAPER_PARAMS))
def test_architecture_parameter_count(name):
    builder, shape = architectures.BUILDERS[name]
    model = builder()
    n = sum(p.numel() for p in model.parameters())
    assert abs(n - PAPER_PARAMS[name]) / PAPER_PARAMS[name] < 0.03, n
    assert n == architectures.PARAM_COUNTS[name]
    assert not model.training


def test_architectures_are_seeded():
    a, b = architectures.deit_tiny(), architectures.deit_tiny()
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)


@pytest.mark.parametrize("name", ["swin_t", "deit_tiny"])
def test_transformer_forward(name):
    builder, shape = architectures.BUILDERS[name]
    with torch.no_grad():
        y = builder()(torch.randn(*shape))
    assert y.shape == (1, 1000) and torch.isfinite(y).all()


def _check_export(name, path, dynamic):
    m = onnx.load(str(path))
    assert m.opset_import[0].version == 17
    assert [i.name for i in m.graph.input] == ["input"] and [o.name for o in m.graph.output] == ["logits"]
    ops = {n.op_type for n in m.graph.node}
    builder, shape = architectures.BUILDERS[name]
    batch = 2 if dynamic else 1
    x = np.random.RandomState(0).randn(batch, *shape[1:]).astype(np.float32)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    y = sess.run(None, {"input": x})[0]
    with torch.no_grad():
        ref = builder()(torch.from_numpy(x)).numpy()
    assert y.shape == (batch, 1000)
    np.testing.assert_allclose(y, ref, atol=1e-3 * max(1.0, float(np.abs(ref).max())))
    return m, ops


def test_export_deit_tiny_dynamic(tmp_path):
    path = export_model("deit_tiny", tmp_path / "deit.onnx", opset=17, dynamic=True)
    m, ops = _check_export("deit_tiny", path, dynamic=True)
    assert {"Shape", "Gather", "Concat"} <= ops
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"


@pytest.mark.slow  # big exports
@pytest.mark.parametrize("name", ["resnet50", "efficientnet_lite4", "swin_t"])
def test_export_big_models(tmp_path, name):
    path = export_model(name, tmp_path / f"{name}.onnx", opset=17, dynamic=True)
    m, ops = _check_export(name, path, dynamic=True)
    if name == "swin_t":
        assert {"Slice", "Concat", "Transpose", "Reshape", "Shape"} <= ops


def test_export_rejects_bad_arguments(tmp_path):
    with pytest.raises(KeyError):
        export_model("resnet18", tmp_path / "x.onnx")
    with pytest.raises(ValueError):
        export_model("deit_tiny", tmp_path / "x.onnx", opset=9)


# --------------------------------------------------------------------------------------------
# tiny trained models and their data

MIN_TOP1 = {"tiny_cnn": 0.95, "tiny_swin": 0.92, "tiny_vit": 0.92}


@pytest.fixture(scope="module")
def heldout():
    return tiny.load_heldout()


def test_heldout_data(heldout):
    images, labels = heldout
    assert images.dtype == np.uint8 and images.ndim == 4 and images.shape[1:] == (3, 32, 32)
    assert labels.dtype.kind == "i" and labels.shape == (images.shape[0],)
    assert set(np.unique(labels)) == set(range(10))
    assert np.array_equal(images[:, 0], images[:, 1]) and np.array_equal(images[:, 0], images[:, 2])
    assert images.max() > 200 and images.min() == 0
    assert tiny.HELDOUT_PATH.stat().st_size < 2_000_000


def test_split_is_reproducible(heldout):
    from samples.tiny.data import load_split

    x_tr, y_tr, x_te, y_te = load_split()
    assert np.array_equal(x_te, heldout[0]) and np.array_equal(y_te, heldout[1])
    assert len(y_tr) + len(y_te) == 1797 and abs(len(y_te) / 1797 - 0.3) < 0.01


def test_calibration_images_come_from_train_split():
    from PIL import Image

    from samples.tiny.data import load_split

    files = sorted(tiny.CAL_DIR.glob("*.png"))
    assert len(files) == 64
    x_tr = load_split()[0]
    train_keys = {hashlib.md5(img.tobytes()).hexdigest() for img in x_tr}
    for f in files:
        img = Image.open(f)
        assert img.mode == "RGB" and img.size == (32, 32)
        chw = np.ascontiguousarray(np.asarray(img).transpose(2, 0, 1))
        assert hashlib.md5(chw.tobytes()).hexdigest() in train_keys, f.name


@pytest.mark.parametrize("name", tiny.MODELS)
def test_tiny_model_reproduces_metrics(name, heldout):
    path = tiny.onnx_path(name)
    assert path.stat().st_size < 2_000_000
    m = onnx.load(str(path))
    onnx.checker.check_model(m)
    assert m.opset_import[0].version == 17
    assert [i.name for i in m.graph.input] == ["input"] and [o.name for o in m.graph.output] == ["logits"]
    dims = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 3, 32, 32]
    images, labels = heldout
    x = (images.astype(np.float32) - 127.5) / 127.5
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    pred = np.array([np.argmax(sess.run(None, {"input": x[i : i + 1]})[0]) for i in range(len(labels))])
    acc = float((pred == labels).mean())
    recorded = tiny.load_metrics()[name]["heldout_top1"]
    assert abs(acc - recorded) <= 0.005, (acc, recorded)
    assert recorded >= MIN_TOP1[name]


def test_tiny_swin_has_roll_and_window_attention():
    m = onnx.load(str(tiny.onnx_path("tiny_swin")))
    ops = [n.op_type for n in m.graph.node]
    assert "Softmax" in ops and "LayerNormalization" in ops and "Erf" in ops
    producers = {o: n.op_type for n in m.graph.node for o in n.output}
    rolls = [n for n in m.graph.node if n.op_type == "Concat" and len(n.input) == 2
             and all(producers.get(i) == "Slice" for i in n.input)]
    assert len(rolls) >= 4  # shift and unshift, over H and W


# --------------------------------------------------------------------------------------------
# configs


@pytest.mark.parametrize("name", tiny.MODELS)
def test_tiny_config(name):
    import yaml

    path = ROOT / "configs" / f"{name}.yaml"
    raw = yaml.safe_load(path.read_text())
    assert set(raw) == {"model_parameters", "input_parameters", "calibration_parameters", "compiler_parameters"}
    assert (path.parent / raw["model_parameters"]["onnx_model"]).resolve() == tiny.onnx_path(name)
    assert (path.parent / raw["calibration_parameters"]["cal_data_dir"]).resolve() == tiny.CAL_DIR
    ip = raw["input_parameters"]
    assert ip["input_shape"] == "1x3x32x32" and ip["norm_type"] == "data_mean_and_scale"
    assert [float(v) for v in ip["mean_value"].split()] == [127.5] * 3
    assert all(abs(float(v) - 1 / 127.5) < 1e-9 for v in ip["scale_value"].split())
    try:
        from hbtool.config import load_config
    except ImportError:  # pragma: no cover - config package not there
        return
    cfg = load_config(path)
    assert cfg.model.onnx_model == tiny.onnx_path(name)


# --------------------------------------------------------------------------------------------
# wart models


def _ops(model):
    return [n.op_type for n in model.graph.node]


def _constant_values(model):
    out = [onnx.numpy_helper.to_array(t) for t in model.graph.initializer]
    for n in model.graph.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    out.append(onnx.numpy_helper.to_array(a.t))
    return out


def _dim_params(value_info):
    return [d.dim_param for d in value_info.type.tensor_type.shape.dim]


def _roll_concats(model):
    producers = {o: n.op_type for n in model.graph.node for o in n.output}
    return [n for n in model.graph.node if n.op_type == "Concat" and len(n.input) >= 2
            and all(producers.get(i) == "Slice" for i in n.input)]


def _check_paddle(m):
    ops = set(_ops(m))
    assert {"Shape", "Gather", "Concat", "Reshape", "ReduceMean", "Sub", "Pow", "Sqrt", "Div", "Erf", "Constant"} <= ops
    assert "LayerNormalization" not in ops
    assert len(m.graph.initializer) == 0  # every weight a Constant node
    dims = _dim_params(m.graph.input[0])
    assert dims[0] and dims[3] and not dims[1] and not dims[2]


def _check_bert(m):
    ops = set(_ops(m))
    assert {"Gather", "Erf", "Softmax", "Where", "Range", "Shape", "ReduceMean"} <= ops
    assert [i.name for i in m.graph.input] == ["input_ids", "attention_mask"]
    for i in m.graph.input:
        assert i.type.tensor_type.elem_type == onnx.TensorProto.INT64
        assert all(_dim_params(i))
    consts = [v for v in _constant_values(m) if v.dtype == np.float32]
    assert any(v.size and np.min(v) <= np.finfo(np.float32).min for v in consts)
    assert any(v.size and np.isneginf(v).any() for v in consts)


def _check_swin(m):
    ops = set(_ops(m))
    assert {"Mod", "Pad", "Slice", "Concat", "Shape", "Gather", "Range", "Transpose", "Reshape", "Softmax"} <= ops
    assert len(_roll_concats(m)) >= 4
    assert all(_dim_params(m.graph.input[0])[:3])


def _check_cnn(m):
    ops = _ops(m)
    assert {"BatchNormalization", "Clip", "Div", "Mul", "Add", "Sigmoid", "Identity", "Dropout", "Constant"} <= set(ops)
    assert ops.count("BatchNormalization") == 3 and ops.count("Clip") == 3
    assert "HardSwish" not in ops and "HardSigmoid" not in ops
    assert len(m.graph.initializer) == 0


def _check_tf(m):
    ops = _ops(m)
    assert ops.count("Transpose") == 4 and ops.count("Reshape") == 2
    assert {"Pad", "MatMul", "ReduceMean"} <= set(ops) and "Gemm" not in ops
    dims = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 32, 32, 3]
    pad_idx = ops.index("Pad")
    assert ops[pad_idx + 1] == "Conv"


def _check_custom(m):
    custom = [n for n in m.graph.node if n.domain == "com.example"]
    assert len(custom) == 1 and custom[0].op_type == "MyOp"


def _check_unsupported(m):
    assert _ops(m).count("CumSum") == 1 and "Conv" in _ops(m)


CHECKS = {
    "paddle_style_ln": _check_paddle,
    "bert_style": _check_bert,
    "swin_block_dynamic": _check_swin,
    "cnn_warts": _check_cnn,
    "tf_style": _check_tf,
    "custom_op": _check_custom,
    "unsupported_op": _check_unsupported,
}


def test_every_wart_is_checked():
    assert set(CHECKS) == set(warts.WARTS)


@pytest.mark.parametrize("name", sorted(warts.WARTS))
def test_wart_model(name, tmp_path):
    builder, opset, _ = warts.WARTS[name]
    path = builder(tmp_path / f"{name}.onnx")
    assert path == tmp_path / f"{name}.onnx" and path.stat().st_size < 1_000_000
    m = onnx.load(str(path))
    onnx.checker.check_model(m)
    assert {o.domain: o.version for o in m.opset_import}[""] == opset
    CHECKS[name](m)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for seed in (0, 1):
        outs = sess.run(None, warts.example_feed(name, seed))
        assert outs and all(np.isfinite(o).all() for o in outs)
    again = builder(tmp_path / f"{name}_again.onnx")
    assert again.read_bytes() == path.read_bytes()  # deterministic


def test_dynamic_warts_run_at_several_sizes(tmp_path):
    paddle = ort.InferenceSession(str(warts.build_paddle_style_ln(tmp_path / "p.onnx")))
    for batch, width in ((1, 32), (3, 100), (2, 257)):
        x = np.random.RandomState(width).randn(batch, 3, 32, width).astype(np.float32)
        (y,) = paddle.run(None, {"x": x})
        assert y.shape == (batch, (width + 3) // 4, 37)
        np.testing.assert_allclose(y.sum(-1), 1.0, rtol=1e-5)
    swin = ort.InferenceSession(str(warts.build_swin_block_dynamic(tmp_path / "s.onnx")))
    for hw in ((7, 7), (13, 20), (3, 30)):
        x = np.random.RandomState(0).randn(1, *hw, 32).astype(np.float32)
        assert swin.run(None, {"x": x})[0].shape == x.shape
    bert = ort.InferenceSession(str(warts.build_bert_style(tmp_path / "b.onnx")))
    for seq in (1, 16, 64):
        ids = np.random.RandomState(seq).randint(0, 1000, size=(2, seq)).astype(np.int64)
        h, pooled = bert.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})
        assert h.shape == (2, seq, 64) and pooled.shape == (2, 64)


def test_custom_op_without_body(tmp_path):
    path = warts.build_custom_op(tmp_path / "c.onnx", with_function=False)
    m = onnx.load(str(path))
    onnx.checker.check_model(m)
    assert not m.functions
    with pytest.raises(Exception):
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_metrics_file_records_every_model():
    metrics = json.loads(tiny.METRICS_PATH.read_text())
    for name in tiny.MODELS:
        assert 0.0 < metrics[name]["heldout_top1"] <= 1.0
