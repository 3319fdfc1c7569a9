"""hbtool.quant.data: calibration folders -> the arrays the model-with-preprocessing takes.

Images come out as raw pixels 0-255 (float32) in the training colour order and layout with a
batch axis; featuremaps as stored, in the model input's dtype. Every bad input is an InputError
naming the file or folder, raised when the set is loaded (before anything is written).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from hbtool.config import config_from_dict, load_config
from hbtool.errors import InputError
from hbtool.ir import Graph
from hbtool.io.colour import rgb_to_yuv444
from hbtool.quant.data import CalibrationSet, load_calibration_data, random_calibration_data

REPO = Path(__file__).resolve().parents[3]
DIGITS = REPO / "samples" / "data" / "digits_cal"
DIGIT_FILES = sorted(DIGITS.glob("*.png"))

# the bundled tiny models' preprocessing: (x - 127.5) / 127.5
IMAGE = {"input_name": "input", "input_type_train": "rgb", "input_layout_train": "NCHW",
         "input_shape": "1x3x32x32", "norm_type": "data_mean_and_scale",
         "mean_value": "127.5", "scale_value": str(1 / 127.5)}


def cfg_of(inputs: dict, dirs, tmp_path: Path | None = None, **cal):
    d = {"model_parameters": {"onnx_model": "m.onnx"},
         "input_parameters": dict(inputs),
         "calibration_parameters": {"cal_data_dir": dirs if isinstance(dirs, str) else
                                    ";".join(str(p) for p in dirs),
                                    "calibration_type": "max", **cal}}
    return config_from_dict(d, base_dir=tmp_path or REPO)


def error_of(fn, *args, **kw) -> str:
    with pytest.raises(InputError) as info:
        fn(*args, **kw)
    return str(info.value)


def pixels(path: Path, mode: str = "RGB", size: tuple[int, int] | None = None) -> np.ndarray:
    with Image.open(path) as im:
        im = im.convert(mode)
        if size is not None and im.size != size:
            im = im.resize(size, Image.Resampling.BILINEAR)
        return np.asarray(im, dtype=np.float32)


def graph_with_inputs(**inputs) -> Graph:
    """A graph whose only content is typed inputs (name -> (shape, dtype))."""
    g = Graph()
    for name, (shape, dtype) in inputs.items():
        g.set_value(name, shape, dtype)
        g.inputs.append(name)
    return g


# ------------------------------------------------------------------------------ images
def test_digits_pngs_load_as_raw_rgb_nchw():
    assert len(DIGIT_FILES) == 64
    cs = load_calibration_data(cfg_of(IMAGE, [DIGITS]))
    assert isinstance(cs, CalibrationSet)
    assert cs.num_samples == len(cs) == 64 and cs.input_names == ["input"]
    assert cs.shapes == {"input": (1, 3, 32, 32)}
    x = cs.sample(0)["input"]
    assert x.shape == (1, 3, 32, 32) and x.dtype == np.float32
    np.testing.assert_array_equal(x[0], pixels(DIGIT_FILES[0]).transpose(2, 0, 1))
    assert x.min() >= 0 and x.max() <= 255 and x.max() > 1  # raw pixels, not normalised
    assert cs.sources(3)["input"].endswith(DIGIT_FILES[3].name)


@pytest.mark.skipif(not (REPO / "configs" / "tiny_cnn.yaml").is_file(), reason="no tiny_cnn.yaml")
def test_tiny_cnn_yaml_with_its_model():
    from hbtool.ir import import_onnx

    cfg = load_config(REPO / "configs" / "tiny_cnn.yaml")
    graph = import_onnx(cfg.require_model())
    cs = load_calibration_data(cfg, graph)
    assert cs.num_samples == 64 and cs.shapes == {"input": (1, 3, 32, 32)}
    b = next(cs.iter_batches(8))["input"]
    assert b.shape == (8, 3, 32, 32) and b.dtype == np.float32 and b.max() <= 255


def test_nhwc_layout():
    cfg = cfg_of({**IMAGE, "input_layout_train": "NHWC", "input_shape": "1x32x32x3"}, [DIGITS])
    x = load_calibration_data(cfg).sample(5)["input"]
    assert x.shape == (1, 32, 32, 3)
    np.testing.assert_array_equal(x[0], pixels(DIGIT_FILES[5]))


def test_bgr_order_reverses_channels(tmp_path):
    img = np.zeros((32, 32, 3), np.uint8)
    img[..., 0], img[..., 1], img[..., 2] = 200, 100, 10
    Image.fromarray(img).save(tmp_path / "a.png")
    rgb = load_calibration_data(cfg_of(IMAGE, [tmp_path])).sample(0)["input"]
    bgr = load_calibration_data(cfg_of({**IMAGE, "input_type_train": "bgr"}, [tmp_path])).sample(0)["input"]
    assert rgb[0, :, 0, 0].tolist() == [200, 100, 10]
    assert bgr[0, :, 0, 0].tolist() == [10, 100, 200]


def test_gray_and_yuv444_training_types(tmp_path):
    cfg = cfg_of({**IMAGE, "input_type_train": "gray", "input_shape": "1x1x32x32",
                  "mean_value": "128"}, [DIGITS])
    x = load_calibration_data(cfg).sample(1)["input"]
    assert x.shape == (1, 1, 32, 32)
    np.testing.assert_array_equal(x[0, 0], pixels(DIGIT_FILES[1], "L"))

    cfg = cfg_of({**IMAGE, "input_type_train": "yuv444", "input_type_rt": "yuv444"}, [DIGITS])
    x = load_calibration_data(cfg).sample(1)["input"]
    np.testing.assert_array_equal(x[0], rgb_to_yuv444(pixels(DIGIT_FILES[1])).transpose(2, 0, 1))
    # gray pixels have Y = value and neutral chroma; pure red follows BT.601
    yuv = rgb_to_yuv444(np.array([[[90, 90, 90], [255, 0, 0]]], np.float32))
    assert yuv[0, 0].tolist() == [90, 128, 128]
    assert yuv[0, 1].tolist() == [76, 85, 255]


def test_resize_by_default_to_input_hw():
    cfg = cfg_of({**IMAGE, "input_shape": "1x3x16x24"}, [DIGITS])
    x = load_calibration_data(cfg).sample(2)["input"]
    assert x.shape == (1, 3, 16, 24)
    np.testing.assert_array_equal(x[0], pixels(DIGIT_FILES[2], size=(24, 16)).transpose(2, 0, 1))


def write_yaml(tmp_path: Path, preprocess_on=None, shape="1x3x16x16") -> Path:
    cal = {"cal_data_dir": str(DIGITS), "calibration_type": "max"}
    if preprocess_on is not None:
        cal["preprocess_on"] = preprocess_on
    doc = {"model_parameters": {"onnx_model": "m.onnx"},
           "input_parameters": {**IMAGE, "input_shape": shape},
           "calibration_parameters": cal}
    p = tmp_path / f"cfg_{preprocess_on}.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_explicit_preprocess_on_false_means_no_resizing(tmp_path):
    cfg = load_config(write_yaml(tmp_path, preprocess_on=False))
    msg = error_of(load_calibration_data, cfg)
    assert DIGIT_FILES[0].name in msg and "32x32" in msg and "16x16" in msg
    assert "preprocess_on" in msg
    # absent key: resize (hbtool's default); true: resize; the argument overrides both
    assert load_calibration_data(load_config(write_yaml(tmp_path))).sample(0)["input"].shape == (1, 3, 16, 16)
    assert load_calibration_data(load_config(write_yaml(tmp_path, True))).sample(0)["input"].shape == (1, 3, 16, 16)
    assert load_calibration_data(cfg, resize=True).num_samples == 64
    error_of(load_calibration_data, load_config(write_yaml(tmp_path)), resize=False)
    # the right size needs no resizing
    assert load_calibration_data(load_config(write_yaml(tmp_path, False, "1x3x32x32"))).num_samples == 64


def test_images_for_a_featuremap_input_are_an_error():
    cfg = cfg_of({"input_name": "x", "input_type_train": "featuremap",
                  "input_shape": "1x3x32x32"}, [DIGITS])
    msg = error_of(load_calibration_data, cfg)
    assert DIGIT_FILES[0].name in msg and "featuremap" in msg


def test_undecodable_image_named(tmp_path):
    (tmp_path / "a.png").write_bytes(b"this is not a png")
    msg = error_of(load_calibration_data, cfg_of(IMAGE, [tmp_path]))
    assert "a.png" in msg and "decoded" in msg


def test_truncated_later_image_named_when_read(tmp_path):
    for k in range(3):
        Image.fromarray(np.full((32, 32, 3), 40 * k, np.uint8)).save(tmp_path / f"{k}.png")
    good = (tmp_path / "2.png").read_bytes()
    (tmp_path / "2.png").write_bytes(good[: len(good) // 2])  # header intact, data cut
    cs = load_calibration_data(cfg_of(IMAGE, [tmp_path]))
    cs.sample(0)
    msg = error_of(cs.sample, 2)
    assert "2.png" in msg


def test_sixteen_bit_image_rejected(tmp_path):
    Image.fromarray(np.full((32, 32), 1000, np.uint16)).save(tmp_path / "deep.png")
    msg = error_of(load_calibration_data, cfg_of(IMAGE, [tmp_path]))
    assert "deep.png" in msg and "8-bit" in msg


# ------------------------------------------------------------------------------- arrays
FEAT = {"input_name": "x", "input_type_train": "featuremap", "input_shape": "1x4x5"}


def test_npy_with_and_without_batch_axis(tmp_path):
    a = np.arange(20, dtype=np.float64).reshape(1, 4, 5)
    np.save(tmp_path / "s0.npy", a)
    np.save(tmp_path / "s1.npy", a[0] * 2)
    cs = load_calibration_data(cfg_of(FEAT, [tmp_path]))
    assert cs.num_samples == 2
    s0, s1 = cs.sample(0)["x"], cs.sample(1)["x"]
    assert s0.dtype == np.float32 and s0.shape == s1.shape == (1, 4, 5)
    np.testing.assert_array_equal(s1, a * 2)


def test_single_stacked_npy_yields_n_samples(tmp_path):
    stack = np.random.default_rng(0).standard_normal((10, 4, 5)).astype(np.float32)
    np.save(tmp_path / "all.npy", stack)
    cs = load_calibration_data(cfg_of(FEAT, [tmp_path]))
    assert cs.num_samples == 10
    np.testing.assert_array_equal(cs.sample(7)["x"], stack[7:8])
    batches = list(cs.iter_batches(4))
    assert [b["x"].shape[0] for b in batches] == [4, 4, 2]
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in batches]), stack)
    # input batch 2: rows are taken two at a time
    cs2 = load_calibration_data(cfg_of({**FEAT, "input_shape": "2x4x5"}, [tmp_path]))
    assert cs2.num_samples == 5
    np.testing.assert_array_equal(cs2.sample(1)["x"], stack[2:4])


def test_npy_wrong_shape_and_not_numpy(tmp_path):
    d1 = tmp_path / "shape"
    d1.mkdir()
    np.save(d1 / "a.npy", np.zeros((1, 4, 5), np.float32))
    np.save(d1 / "b.npy", np.zeros((1, 5, 4), np.float32))
    msg = error_of(load_calibration_data, cfg_of(FEAT, [d1]))
    assert "b.npy" in msg and "(1, 5, 4)" in msg and "(1, 4, 5)" in msg
    d2 = tmp_path / "junk"
    d2.mkdir()
    (d2 / "a.npy").write_text("hello")
    msg = error_of(load_calibration_data, cfg_of(FEAT, [d2]))
    assert "a.npy" in msg and "not a numpy" in msg
    d3 = tmp_path / "objects"
    d3.mkdir()
    np.save(d3 / "a.npy", np.array([[None] * 5] * 4, dtype=object)[None], allow_pickle=True)
    msg = error_of(load_calibration_data, cfg_of(FEAT, [d3]))
    assert "a.npy" in msg and "object" in msg


def test_bin_typed_by_cal_data_type(tmp_path):
    img = (np.arange(3 * 32 * 32) % 256).astype(np.uint8).reshape(1, 3, 32, 32)
    img.tofile(tmp_path / "a.bin")
    cs = load_calibration_data(cfg_of(IMAGE, [tmp_path]))  # image folder: uint8 by default
    x = cs.sample(0)["input"]
    assert x.dtype == np.float32
    np.testing.assert_array_equal(x, img.astype(np.float32))

    feat = tmp_path / "feat_f32"
    feat.mkdir()
    v = np.linspace(-1, 1, 20, dtype=np.float32).reshape(1, 4, 5)
    v.tofile(feat / "a.bin")
    np.testing.assert_array_equal(load_calibration_data(cfg_of(FEAT, [feat])).sample(0)["x"], v)

    ids = tmp_path / "ids"
    ids.mkdir()
    t = np.arange(20, dtype=np.int64).reshape(1, 4, 5)
    t.tofile(ids / "a.bin")
    x = load_calibration_data(cfg_of(FEAT, [ids], cal_data_type="int64")).sample(0)["x"]
    assert x.dtype == np.int64
    np.testing.assert_array_equal(x, t)


def test_bin_size_mismatch_names_bytes(tmp_path):
    np.zeros(3 * 32 * 32 - 1, np.uint8).tofile(tmp_path / "short.bin")
    msg = error_of(load_calibration_data, cfg_of(IMAGE, [tmp_path]))
    assert "short.bin" in msg and "3071 bytes" in msg and "3072 bytes" in msg
    np.zeros(3 * 32 * 32, np.float32).tofile(tmp_path / "short.bin")  # float32 dump, uint8 expected
    msg = error_of(load_calibration_data, cfg_of(IMAGE, [tmp_path]))
    assert "12288 bytes" in msg and "cal_data_type" in msg and "fits float32 or int32" in msg


def test_int64_token_ids_from_the_graph_dtype(tmp_path):
    cfg = cfg_of({"input_name": "ids", "input_type_train": "featuremap",
                  "input_shape": "1x8"}, [tmp_path])
    graph = graph_with_inputs(ids=((1, 8), np.int64))
    np.save(tmp_path / "a.npy", np.arange(8, dtype=np.int64)[None])
    np.save(tmp_path / "b.npy", np.arange(8, dtype=np.float64)[None] * 3)  # whole floats: cast
    cs = load_calibration_data(cfg, graph)
    assert cs.dtypes == {"ids": np.dtype(np.int64)}
    b = next(cs.iter_batches(2))["ids"]
    assert b.dtype == np.int64 and b.shape == (2, 8) and b[1, 2] == 6
    np.save(tmp_path / "b.npy", np.full((1, 8), 0.5))
    msg = error_of(load_calibration_data, cfg, graph)
    assert "b.npy" in msg and "8 of 8 values are not whole numbers" in msg and "int64" in msg
    # without a graph, integer files keep integers
    np.save(tmp_path / "b.npy", np.arange(8, dtype=np.int32)[None])
    assert load_calibration_data(cfg).sample(1)["ids"].dtype == np.int64


def test_nan_and_inf_named_with_count(tmp_path):
    a = np.zeros((1, 4, 5), np.float32)
    np.save(tmp_path / "a.npy", a)
    a[0, 0, :2] = np.nan
    a[0, 1, 0] = np.inf
    np.save(tmp_path / "b.npy", a)
    msg = error_of(load_calibration_data, cfg_of(FEAT, [tmp_path]))
    assert "b.npy" in msg and "3 of 20 values are NaN or Inf" in msg and "fix:" in msg
    stacked = tmp_path / "stacked"
    stacked.mkdir()
    s = np.zeros((3, 4, 5), np.float32)
    s[2, 0, 0] = np.nan
    np.save(stacked / "all.npy", s)
    msg = error_of(load_calibration_data, cfg_of(FEAT, [stacked]))
    assert "all.npy (sample 2)" in msg and "1 of 20" in msg
    raw = tmp_path / "raw_f32"
    raw.mkdir()
    a.tofile(raw / "r.bin")
    assert "r.bin" in error_of(load_calibration_data, cfg_of(FEAT, [raw]))


# ------------------------------------------------------------------------------ folders
def test_missing_empty_and_unknown_folders(tmp_path):
    msg = error_of(load_calibration_data, cfg_of(FEAT, [tmp_path / "nope"]))
    assert "nope" in msg
    empty = tmp_path / "empty"
    empty.mkdir()
    msg = error_of(load_calibration_data, cfg_of(FEAT, [empty]))
    assert "empty" in msg and str(empty) in msg
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("x")
    msg = error_of(load_calibration_data, cfg_of(FEAT, [other]))
    assert "no file of a known type" in msg and "notes.txt" in msg and str(other) in msg
    # unknown files next to known ones are ignored
    np.save(other / "a.npy", np.zeros((1, 4, 5), np.float32))
    assert load_calibration_data(cfg_of(FEAT, [other])).num_samples == 1


def test_no_folder_configured_is_an_input_error():
    d = {"model_parameters": {"onnx_model": "m.onnx"}, "input_parameters": dict(FEAT),
         "calibration_parameters": {"calibration_type": "max"}}
    msg = error_of(load_calibration_data, config_from_dict(d, base_dir=REPO))
    assert "cal_data_dir" in msg


def test_more_model_inputs_than_folders(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((1, 4, 5), np.float32))
    graph = graph_with_inputs(x=((1, 4, 5), np.float32), mask=((1, 4), np.int64))
    msg = error_of(load_calibration_data, cfg_of(FEAT, [tmp_path]), graph)
    assert "2 inputs" in msg and "mask" in msg and "cal_data_dir" in msg


def two_input_cfg(img_dir: Path, ids_dir: Path):
    inputs = {"input_name": "image; ids", "input_type_train": "rgb; featuremap",
              "input_layout_train": "NCHW; None", "input_shape": "1x3x32x32; 1x6",
              "norm_type": "data_mean_and_scale; no_preprocess",
              "mean_value": "127.5; None", "scale_value": "0.0078125; None"}
    return cfg_of(inputs, [img_dir, ids_dir], cal_data_type="uint8; int64")


def test_multi_input_matched_by_sorted_name(tmp_path):
    img_dir, ids_dir = tmp_path / "img", tmp_path / "ids"
    img_dir.mkdir(), ids_dir.mkdir()
    for k in (2, 0, 1):  # written out of order; matched by sorted name
        Image.fromarray(np.full((32, 32, 3), 10 * k, np.uint8)).save(img_dir / f"s{k}.png")
        np.full((1, 6), k, np.int64).tofile(ids_dir / f"s{k}.bin")
    cs = load_calibration_data(two_input_cfg(img_dir, ids_dir))
    assert cs.input_names == ["image", "ids"] and cs.num_samples == 3
    for k in range(3):
        s = cs.sample(k)
        assert s["image"].max() == 10 * k and s["ids"].dtype == np.int64 and s["ids"].max() == k
    b = next(cs.iter_batches(3))
    assert b["image"].shape == (3, 3, 32, 32) and b["ids"].shape == (3, 6)

    (ids_dir / "s2.bin").unlink()
    msg = error_of(load_calibration_data, two_input_cfg(img_dir, ids_dir))
    assert str(img_dir) in msg and str(ids_dir) in msg and "3 samples" in msg and "holds 2" in msg


# ---------------------------------------------------------------------------- streaming
def test_streaming_batches_and_totals():
    cs = load_calibration_data(cfg_of(IMAGE, [DIGITS]))
    assert cs.num_batches(8) == 8 and cs.num_batches(10) == 7
    sizes = [b["input"].shape[0] for b in cs.iter_batches(8)]
    assert sizes == [8] * 8
    sizes = [b["input"].shape[0] for b in cs.iter_batches(10)]
    assert sizes == [10] * 6 + [4]
    assert next(cs.iter_batches(1))["input"].shape == (1, 3, 32, 32)
    first = next(cs.iter_batches(64))["input"]
    np.testing.assert_array_equal(first[9], cs.sample(9)["input"][0])
    error_of(lambda: next(cs.iter_batches(0)))


def test_files_are_read_on_demand(monkeypatch):
    cs = load_calibration_data(cfg_of(IMAGE, [DIGITS]))
    reader = cs._readers[0]
    calls = []
    original = reader.read
    monkeypatch.setattr(reader, "read", lambda i: calls.append(i) or original(i))
    it = cs.iter_batches(8)
    next(it)
    assert calls == list(range(8))  # only the first batch has been read
    next(it)
    assert len(calls) == 16


def test_max_samples_and_num_samples_key():
    assert load_calibration_data(cfg_of(IMAGE, [DIGITS]), max_samples=5).num_samples == 5
    assert load_calibration_data(cfg_of(IMAGE, [DIGITS], num_samples=12)).num_samples == 12
    assert load_calibration_data(cfg_of(IMAGE, [DIGITS]), max_samples=500).num_samples == 64


# ------------------------------------------------------------------------------- random
def test_random_data_for_skip():
    inputs = {"input_name": "image; ids; feat", "input_type_train": "rgb; featuremap; featuremap",
              "input_layout_train": "NHWC; None; None",
              "input_shape": "1x16x16x3; 1x7; 1x4x5",
              "norm_type": "data_mean; no_preprocess; no_preprocess",
              "mean_value": "128; None; None"}
    cfg = config_from_dict({"model_parameters": {"onnx_model": "m.onnx"},
                            "input_parameters": inputs,
                            "calibration_parameters": {"calibration_type": "skip",
                                                       "cal_data_type": "uint8; int64; float32"}},
                           base_dir=REPO)
    g = graph_with_inputs(image=((1, 16, 16, 3), np.float32), ids=((1, 7), np.int64),
                          feat=((1, 4, 5), np.float32))
    g.add_const(np.zeros((30, 4), np.float32), name="table")
    g.add_node("Gather", ["table", "ids"], ["emb"])
    cs = random_calibration_data(cfg, 6, seed=3, graph=g)
    assert cs.num_samples == 6 and cs.input_names == ["image", "ids", "feat"]
    s = cs.sample(0)
    assert s["image"].dtype == np.float32 and s["image"].shape == (1, 16, 16, 3)
    assert s["image"].min() >= 0 and s["image"].max() <= 255 and s["image"].max() > 100
    assert np.array_equal(s["image"], np.round(s["image"]))
    assert s["ids"].dtype == np.int64 and 0 <= s["ids"].min() and s["ids"].max() < 30
    assert s["feat"].dtype == np.float32 and abs(float(s["feat"].mean())) < 2
    again = CalibrationSet.random(cfg, 6, seed=3, graph=g)
    for k in range(6):
        for name in cs.input_names:
            np.testing.assert_array_equal(cs.sample(k)[name], again.sample(k)[name])
    b = list(cs.iter_batches(4))
    np.testing.assert_array_equal(b[1]["feat"][0], cs.sample(4)["feat"][0])
    # without a graph, integer inputs stay in [0, 2); specs work as well as a config
    ints = random_calibration_data([cfg.inputs[1]], 3, seed=0)
    assert ints.dtypes["ids"] == np.int64 and set(np.unique(ints.sample(0)["ids"])) <= {0, 1}
    # load_calibration_data hands calibration_type skip to the random generator
    skip = load_calibration_data(cfg, g)
    assert skip.num_samples == 8 and skip.sample(0)["ids"].max() < 30
