"""Run-time input types: the artifact and the quantized ONNX take the chip's buffer (nv12, yuv444, rgb/bgr, gray, *_128).

The colour conversion kernel is checked against the float BT.601 formulas written out here
(not hbtool's matrices), the whole pipeline simulate == quantized ONNX bit for bit, and the
camera's RGB -> nv12 conversion against known JFIF values.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from tests.helpers import make_model, run_ort, tensor, vinfo
from hbtool.compiler.artifact import from_bytes
from hbtool.compiler.compile import compile_model
from hbtool.config import config_from_dict
from hbtool.errors import InputError
from hbtool.kernels.colour import InputConvert
from hbtool.quant.calibrate import run_calibration, write_outputs
from hbtool.io.runtime_input import to_runtime
from hbtool.simulator.executor import Executor

MEAN = (123.675, 116.28, 103.53)
SCALE = (0.01712475, 0.017507, 0.01742919)


# ------------------------------------------------------------------------------- float references
def nv12_planes(buf: np.ndarray, h: int, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Y, U, V at full resolution (float64) of an (N, 3H/2, W) nv12 buffer, chroma repeated over its 2x2 block."""
    y = buf[:, :h].astype(np.float64)
    uv = buf[:, h:].reshape(buf.shape[0], h // 2, w // 2, 2).astype(np.float64)
    up = lambda c: np.repeat(np.repeat(c, 2, axis=1), 2, axis=2)  # noqa: E731
    return y, up(uv[..., 0]), up(uv[..., 1])


def bt601_rgb(y, u, v, video: bool = False) -> np.ndarray:
    """The textbook BT.601 YUV -> RGB (JFIF full range, or video range), float64, channels on axis 1."""
    if video:
        y, u, v = (y - 16) * 1.164383562, u, v
        r = y + 1.596026786 * (v - 128)
        g = y - 0.391762290 * (u - 128) - 0.812967647 * (v - 128)
        b = y + 2.017232143 * (u - 128)
    else:
        r = y + 1.402 * (v - 128)
        g = y - 0.344136 * (u - 128) - 0.714136 * (v - 128)
        b = y + 1.772 * (u - 128)
    return np.stack([r, g, b], axis=1)


def reference_codes(rgb: np.ndarray, s_out: float) -> np.ndarray:
    out = (rgb - np.array(MEAN)[None, :, None, None]) * np.array(SCALE)[None, :, None, None]
    return np.clip(np.floor(out / s_out + 0.5), -128, 127)


@pytest.mark.parametrize("video", [False, True])
def test_nv12_kernel_matches_float_bt601_within_one_lsb(video):
    rng = np.random.default_rng(3)
    h, w, s_out = 6, 8, 0.02
    buf = rng.integers(0, 256, (4, h * 3 // 2, w), dtype=np.uint8)
    k = InputConvert.build("nv12", "rgb", h, w, MEAN, SCALE, s_out, 8, layout_out="NCHW", video_range=video)
    got = k.apply_numpy(buf)
    ref = reference_codes(bt601_rgb(*nv12_planes(buf, h, w), video=video), s_out)
    assert got.shape == (4, 3, h, w)
    diff = np.abs(got - ref)
    assert diff.max() <= 1 and np.mean(diff == 0) > 0.97, (diff.max(), np.mean(diff == 0))
    # the ONNX form computes the same integers
    onnx_out = run_ort(k.onnx_model([list(buf.shape)]), {"x0": buf})[0]
    assert np.array_equal(onnx_out, got)


def test_swapped_chroma_is_caught_by_the_reference():
    """The reference is sharp enough: reading V as U is many LSB off (guards the test above)."""
    rng = np.random.default_rng(4)
    h, w = 4, 4
    buf = rng.integers(0, 256, (2, 6, w), dtype=np.uint8)
    y, u, v = nv12_planes(buf, h, w)
    k = InputConvert.build("nv12", "rgb", h, w, MEAN, SCALE, 0.02)
    assert np.abs(k.apply_numpy(buf) - reference_codes(bt601_rgb(y, v, u), 0.02)).max() > 5


@pytest.mark.parametrize("fmt,train,layout_in,offset", [
    ("yuv444", "rgb", "NCHW", 0), ("yuv444", "bgr", "NHWC", 128), ("bgr", "rgb", "NHWC", 0),
    ("rgb", "rgb", "NHWC", 128), ("gray", "gray", "NHWC", 128), ("nv12", "yuv444", "nv12", 0),
])
def test_other_formats_numpy_equals_onnx_and_the_formula(fmt, train, layout_in, offset):
    rng = np.random.default_rng(5)
    h, w, c = 4, 6, 1 if fmt == "gray" else 3
    mean, scale = (MEAN[:c], SCALE[:c])
    k = InputConvert.build(fmt, train, h, w, mean, scale, 0.02, 8, layout_in=layout_in, layout_out="NCHW", offset=offset)
    lo = -128 if offset else 0
    buf = rng.integers(lo, lo + 256, k.input_shape(2)).astype(k.input_dtype)
    got = k.apply_numpy(buf)
    assert np.array_equal(run_ort(k.onnx_model([list(buf.shape)]), {"x0": buf})[0], got)
    if fmt == "nv12":
        y, u, v = nv12_planes(buf, h, w)
        train_px = np.stack([y, u, v], axis=1)
    else:
        px = buf.astype(np.float64) + offset
        px = px if layout_in == "NCHW" else np.transpose(px, (0, 3, 1, 2))
        if fmt == "yuv444":
            rgb = bt601_rgb(px[:, 0], px[:, 1], px[:, 2])
            train_px = rgb[:, ::-1] if train == "bgr" else rgb
        else:
            train_px = px[:, ::-1] if (fmt, train) == ("bgr", "rgb") else px
    out = (train_px - np.array(mean)[None, :, None, None]) * np.array(scale)[None, :, None, None]
    ref = np.clip(np.floor(out / 0.02 + 0.5), -128, 127)
    assert np.abs(got - ref).max() <= 1


def test_camera_conversion_of_pure_colours_is_jfif():
    """Red, green, blue, white as 2x2 images: Y/U/V of the JFIF tables (rounded half up)."""
    colours = {(255, 0, 0): (76, 85, 255), (0, 255, 0): (150, 44, 21), (0, 0, 255): (29, 255, 107), (255, 255, 255): (255, 128, 128)}
    spec = _cfg("rgb", "nv12", shape="1x3x2x2").inputs[0]
    for rgb, (y, u, v) in colours.items():
        img = np.broadcast_to(np.array(rgb, np.float32)[None, :, None, None], (1, 3, 2, 2))
        buf = to_runtime(img, spec)
        assert buf.shape == (1, 3, 2) and buf.dtype == np.uint8
        assert buf[0, :2].tolist() == [[y, y], [y, y]] and buf[0, 2].tolist() == [u, v], (rgb, buf)


# ------------------------------------------------------------------------------------- pipeline
def _conv_model(channels_in: int = 3, size: int = 16) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, channels_in, 3, 3)).astype(np.float32) * 0.3
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["y"], name="gap")]
    return make_model(nodes, [vinfo("x", [1, channels_in, size, size])], [vinfo("y", [1, 8, 1, 1])], [tensor("w", w)])


def _cfg(train: str, rt: str, tmp=None, layout_rt: str | None = None, shape: str = "1x3x16x16", norm: bool = True,
         space: str | None = None):
    c = 1 if train == "gray" else 3
    ip = {"input_name": "x", "input_shape": shape, "input_type_train": train, "input_type_rt": rt,
          "input_layout_train": "NCHW"}
    if norm:
        ip.update(norm_type="data_mean_and_scale", mean_value=" ".join(map(str, MEAN[:c])),
                  scale_value=" ".join(map(str, SCALE[:c])))
    if layout_rt:
        ip["input_layout_rt"] = layout_rt
    if space:
        ip["input_space_and_range"] = space
    base = tmp or "."
    return config_from_dict({
        "model_parameters": {"onnx_model": f"{base}/m.onnx", "working_dir": f"{base}/wd", "output_model_file_prefix": "m"},
        "input_parameters": ip, "calibration_parameters": {"calibration_type": "max", "cal_data_dir": f"{base}/cal"},
    }, base_dir=tmp)


def _smooth_images(n: int, c: int, size: int, seed: int) -> np.ndarray:
    """Natural-ish images: smooth colour gradients plus blobs (chroma varies slowly, as in photos)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    out = np.empty((n, c, size, size), np.float32)
    for k in range(n):
        for ch in range(c):
            a, b, f = rng.uniform(-1, 1, 3)
            out[k, ch] = 128 + 90 * np.sin(3 * a * xx + 3 * b * yy + 6 * f) + rng.normal(0, 6, (size, size))
    return np.clip(np.rint(out), 0, 255)


def _pipeline(tmp, train: str, rt: str, **kw):
    c = 1 if train == "gray" else 3
    onnx.save(_conv_model(c), tmp / "m.onnx")
    (tmp / "cal").mkdir()
    for k, img in enumerate(_smooth_images(8, c, 16, 1)):
        np.save(tmp / "cal" / f"{k}.npy", img[None])
    cfg = _cfg(train, rt, tmp, shape=f"1x{c}x16x16", **kw)
    result = run_calibration(cfg)
    write_outputs(cfg, result, "")
    compiled = compile_model(cfg)
    return cfg, result, compiled


def _check_bit_exact(tmp, cfg, compiled, images):
    ex = Executor(from_bytes(compiled.data))
    sess = ort.InferenceSession(str(tmp / "wd" / "m_quantized_model.onnx"), providers=["CPUExecutionProvider"])
    feeds = [to_runtime(img[None], cfg.inputs[0]) for img in images]
    for f in feeds:
        assert np.array_equal(ex.run({"x": f})["y"], sess.run(None, {"x": f})[0])
    return ex, sess, feeds


def test_nv12_pipeline_artifact_takes_nv12_and_simulates_like_the_quantized_model(tmp_path):
    from hbtool.costmodel.schedule import estimate
    from hbtool.simulator.simulate import simulate

    cfg, result, compiled = _pipeline(tmp_path, "rgb", "nv12")
    desc = compiled.header["inputs"][0]
    assert desc["shape"] == [1, 24, 16] and desc["dtype"] == "uint8" and desc["runtime"]["format"] == "nv12"
    sess = ort.InferenceSession(str(tmp_path / "wd" / "m_quantized_model.onnx"), providers=["CPUExecutionProvider"])
    assert sess.get_inputs()[0].type == "tensor(uint8)" and sess.get_inputs()[0].shape == [1, 24, 16]
    assert not compiled.fallbacks
    conv = [n for n in compiled.program.nodes if n.op_type == "HzInputConvert"]
    assert len(conv) == 1 and conv[0].meta["unit"] == "vector" and conv[0].inputs == ["x"]
    assert not any(n.op_type == "HzQuantize" for n in compiled.program.nodes)
    images = _smooth_images(4, 3, 16, 7)
    ex, sess, feeds = _check_bit_exact(tmp_path, cfg, compiled, images)
    # close to the float model on the training-type images (nv12 loses only chroma resolution)
    f_sess = ort.InferenceSession(str(tmp_path / "wd" / "m_original_float_model.onnx"), providers=["CPUExecutionProvider"])
    ref = np.concatenate([f_sess.run(None, {"x": img[None]})[0] for img in images]).ravel()
    got = np.concatenate([ex.run({"x": f})["y"] for f in feeds]).ravel()
    assert np.dot(ref, got) / np.linalg.norm(ref) / np.linalg.norm(got) > 0.995
    # simulate reads raw .nv12 frames (two in one file) and matches the quantized ONNX exactly
    (tmp_path / "frames.nv12").write_bytes(b"".join(f.tobytes() for f in feeds[:2]))
    sim = simulate(_write(tmp_path, compiled), {"x": tmp_path / "frames.nv12"}, compare=tmp_path / "wd" / "m_quantized_model.onnx")
    assert sim.samples == 2 and sim.comparisons[0].max_lsb == 0.0
    # the perf estimate counts the conversion
    ops = {op.name: op for op in estimate(compiled.header).ops}
    op = ops[conv[0].name]
    assert op.kernel == "InputConvert" and op.elements >= 3 * 16 * 16 * 3 and "nv12 -> rgb" in op.note


def _write(tmp, compiled):
    path = tmp / "m.hbm"
    path.write_bytes(compiled.data)
    return path


def test_simulate_reads_images_as_the_camera_converts_them(tmp_path):
    from PIL import Image

    from hbtool.simulator.simulate import simulate

    cfg, _, compiled = _pipeline(tmp_path, "rgb", "nv12")
    art = _write(tmp_path, compiled)
    folder = tmp_path / "imgs"
    folder.mkdir()
    images = _smooth_images(2, 3, 16, 9)
    for k, img in enumerate(images):
        Image.fromarray(np.transpose(img, (1, 2, 0)).astype(np.uint8)).save(folder / f"{k}.png")
    sim = simulate(art, {"x": folder})
    ex = Executor(from_bytes(compiled.data))
    want = np.concatenate([ex.run({"x": to_runtime(img[None], cfg.inputs[0])})["y"] for img in images])
    assert np.array_equal(sim.outputs["y"], want)


def test_simulate_wrong_nv12_size_names_the_bytes(tmp_path):
    from hbtool.simulator.simulate import simulate

    _, _, compiled = _pipeline(tmp_path, "rgb", "nv12")
    (tmp_path / "bad.nv12").write_bytes(bytes(100))
    with pytest.raises(InputError) as info:
        simulate(_write(tmp_path, compiled), {"x": tmp_path / "bad.nv12"})
    assert "100 bytes" in info.value.problem and "384 bytes" in info.value.problem


@pytest.mark.parametrize("train,rt,layout_rt", [("rgb", "yuv444", "NHWC"), ("gray", "gray_128", "NHWC"), ("rgb", "bgr_128", None)])
def test_yuv444_gray_and_128_pipelines_are_bit_exact(tmp_path, train, rt, layout_rt):
    cfg, result, compiled = _pipeline(tmp_path, train, rt, layout_rt=layout_rt)
    desc = compiled.header["inputs"][0]
    c = 1 if train == "gray" else 3
    want_shape = [1, 16, 16, c] if layout_rt == "NHWC" else [1, c, 16, 16]
    assert desc["shape"] == want_shape and desc["dtype"] == ("int8" if rt.endswith("_128") else "uint8")
    assert not compiled.fallbacks
    _check_bit_exact(tmp_path, cfg, compiled, _smooth_images(3, c, 16, 11))
    assert result.output_errors["y"]["cosine"] > 0.999


def test_video_range_nv12_pipeline(tmp_path):
    cfg, result, compiled = _pipeline(tmp_path, "rgb", "nv12", space="bt601_video")
    assert compiled.header["inputs"][0]["runtime"]["space_and_range"] == "bt601_video"
    _check_bit_exact(tmp_path, cfg, compiled, _smooth_images(2, 3, 16, 12))
    assert result.output_errors["y"]["cosine"] > 0.995


def test_no_preprocess_nv12_still_converts(tmp_path):
    """norm_type no_preprocess with nv12: the conversion alone (mean 0, scale 1) is still in the program."""
    cfg, result, compiled = _pipeline(tmp_path, "rgb", "nv12", norm=False)
    assert compiled.header["inputs"][0]["shape"] == [1, 24, 16]
    _check_bit_exact(tmp_path, cfg, compiled, _smooth_images(2, 3, 16, 13))
    assert result.output_errors["y"]["cosine"] > 0.995


def test_same_type_and_featuremap_inputs_are_unchanged(tmp_path):
    """rgb -> rgb in the training layout keeps the float32 pixel input; a featuremap keeps its float input."""
    _, _, compiled = _pipeline(tmp_path, "rgb", "rgb")
    desc = compiled.header["inputs"][0]
    assert desc["dtype"] == "float32" and desc["shape"] == [1, 3, 16, 16] and "runtime" not in desc
    assert not any(n.op_type == "HzInputConvert" for n in compiled.program.nodes)
    onnx.save(_conv_model(), tmp_path / "f.onnx")
    cfg = config_from_dict({
        "model_parameters": {"onnx_model": str(tmp_path / "f.onnx"), "working_dir": str(tmp_path / "wf"), "output_model_file_prefix": "f"},
        "input_parameters": {"input_name": "x", "input_shape": "1x3x16x16", "input_type_train": "featuremap",
                             "input_type_rt": "featuremap", "norm_type": "no_preprocess"},
        "calibration_parameters": {"calibration_type": "skip", "num_samples": 2}}, base_dir=tmp_path)
    write_outputs(cfg, run_calibration(cfg), "")
    fm = compile_model(cfg)
    assert fm.header["inputs"][0]["dtype"] == "float32" and fm.header["inputs"][0]["quantize"] is not None
    assert not any(n.op_type == "HzInputConvert" for n in fm.program.nodes)


def test_128_types_follow_their_base_type_in_the_config():
    assert _cfg("rgb", "yuv444_128").inputs[0].type_rt == "yuv444_128"
    from hbtool.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        _cfg("gray", "rgb_128", shape="1x1x16x16")
    assert "input_type_rt" in str(info.value)


def test_tiny_cnn_nv12_accuracy_within_0p3_points_of_rgb(tmp_path):
    """The bundled classifier, deployed with nv12 input on camera-converted held-out images, vs rgb input."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "nv12_accuracy.py"
    spec = importlib.util.spec_from_file_location("nv12_accuracy", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    res = bench.top1_pair("max", simulate=20, work=tmp_path)
    assert res["nv12"]["simulated_exact"] == 20 and res["rgb"]["simulated_exact"] == 20
    assert res["nv12"]["top1"] > 0.97
    assert abs(res["nv12"]["top1"] - res["rgb"]["top1"]) <= 0.003


def test_nv12_with_the_conversion_forced_to_cpu_is_a_clear_error(tmp_path):
    from hbtool.errors import NotDeployableError

    c = 3
    onnx.save(_conv_model(c), tmp_path / "m.onnx")
    (tmp_path / "cal").mkdir()
    np.save(tmp_path / "cal" / "0.npy", _smooth_images(1, c, 16, 1))
    d = {"model_parameters": {"onnx_model": str(tmp_path / "m.onnx"), "working_dir": str(tmp_path / "wd"),
                              "output_model_file_prefix": "m", "node_info": {"HzPreprocess_x": {"ON": "CPU"}}},
         "input_parameters": {"input_name": "x", "input_shape": "1x3x16x16", "input_type_train": "rgb", "input_type_rt": "nv12",
                              "input_layout_train": "NCHW", "norm_type": "data_scale", "scale_value": "0.0078"},
         "calibration_parameters": {"calibration_type": "max", "cal_data_dir": str(tmp_path / "cal")}}
    with pytest.raises(NotDeployableError) as info:
        run_calibration(config_from_dict(d, base_dir=tmp_path))
    assert "nv12" in info.value.problem and "HzPreprocess" in info.value.fix


def test_conversion_built_from_float64_and_float32_attributes_is_the_same():
    """scale_value 1/255 (not a float32) once gave calibrate's quantized ONNX M = 32639 and the artifact 32640.

    Calibrate lowers from the in-memory graph (float64 attributes), compile from the calibrated ONNX
    (float32 attributes); 1-LSB differences showed on 0.24 % of a 640x640 YOLO input. The lowering now
    builds the kernel from the float32 values. These two numbers make the raw values disagree.
    """
    from hbtool.kernels.colour import InputConvert
    from hbtool.quant.lower import stored_floats

    sc, s_out = 0.003922362927663829, 0.008160377492590356
    raw64 = InputConvert.build("nv12", "rgb", 16, 16, [0.0], [sc], s_out)
    raw32 = InputConvert.build("nv12", "rgb", 16, 16, [0.0], [float(np.float32(sc))], s_out)
    assert not np.array_equal(raw64.requant.M, raw32.requant.M)          # the hazard is real
    a = InputConvert.build("nv12", "rgb", 16, 16, stored_floats([0.0]), stored_floats([sc]), s_out)
    b = InputConvert.build("nv12", "rgb", 16, 16, stored_floats([0.0]), stored_floats([np.float32(sc)]), s_out)
    np.testing.assert_array_equal(a.requant.M, b.requant.M)
    np.testing.assert_array_equal(a.bias, b.bias)
