"""One colour conversion: calibration and the chip's run-time converter see a camera frame identically.

* an nv12 frame in a calibration folder gives the float model exactly the values the chip's
  ``InputConvert`` computes from the same frame before it requantizes (bit for bit, every training
  colour, full and video range; random bytes and a camera-converted random RGB image);
* a random RGB image calibrated for a yuv444-trained model is the same yuv444 the camera
  conversion gives ``hbtool simulate`` (it differed by 1 LSB on ~3.8 % of pixels);
* the BT.601 coefficients are written in one module (:mod:`hbtool.kernels.colour`);
* every image suffix works for every input kind.
"""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hbtool.config import config_from_dict
from hbtool.io.files import IMAGE_SUFFIXES
from hbtool.io.runtime_input import to_runtime
from hbtool.kernels.colour import FRACTION_BITS, InputConvert
from hbtool.quant.data import load_calibration_data

H, W = 8, 12
MEAN = 127.5                     # a whole number of 2**-14 steps: the kernel folds it into B exactly


def _cfg(tmp: Path, train: str, rt: str, space: str = "regular", layout_rt: str | None = None):
    ip = {"input_name": "x", "input_shape": f"1x3x{H}x{W}", "input_type_train": train, "input_type_rt": rt,
          "input_layout_train": "NCHW", "norm_type": "data_mean_and_scale", "mean_value": str(MEAN),
          "scale_value": "0.0078125", "input_space_and_range": space}
    if layout_rt:
        ip["input_layout_rt"] = layout_rt
    return config_from_dict({
        "model_parameters": {"onnx_model": str(tmp / "m.onnx"), "working_dir": str(tmp / "wd")},
        "input_parameters": ip,
        "calibration_parameters": {"cal_data_dir": str(tmp / "cal"), "cal_data_type": "uint8"}}, base_dir=tmp)


def _random_rgb(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (H, W, 3)).astype(np.uint8)


def _frame(source: str, train: str, space: str) -> np.ndarray:
    """An nv12 buffer (1, 3H/2, W): random bytes, or a random RGB image as the camera converts it."""
    if source == "bytes":
        return np.random.default_rng(5).integers(0, 256, (1, H * 3 // 2, W)).astype(np.uint8)
    rgb = _random_rgb(6).astype(np.float32)
    spec = _cfg(Path("."), "rgb", "nv12", space).inputs[0]
    return to_runtime(rgb.transpose(2, 0, 1)[None], spec)


@pytest.mark.parametrize("source", ["bytes", "camera"])
@pytest.mark.parametrize("train,space", [("rgb", "regular"), ("bgr", "regular"), ("yuv444", "regular"),
                                         ("rgb", "bt601_video"), ("yuv444", "bt601_video")])
def test_an_nv12_frame_calibrates_on_exactly_what_the_chip_converts(tmp_path, source, train, space):
    frame = _frame(source, train, space)
    (tmp_path / "cal").mkdir()
    frame.tofile(tmp_path / "cal" / "0.nv12")
    cfg = _cfg(tmp_path, train, "nv12", space)
    calibration = load_calibration_data(cfg).sample(0)["x"].transpose(0, 2, 3, 1).astype(np.float64)

    chip = InputConvert.build("nv12", train, H, W, [MEAN], [0.0078125], 1 / 64, video_range=space == "bt601_video")
    sums = chip.accumulate(frame)            # what the chip's requantize reads, mean folded in
    assert np.array_equal(sums, (calibration - MEAN) * 2**FRACTION_BITS)
    if source == "bytes" and train != "yuv444":
        assert np.any(calibration != np.rint(calibration))   # not rounded to 8 bits: the chip does not round either


@pytest.mark.parametrize("rt,layout_rt", [("yuv444", "NHWC"), ("yuv444", "NCHW")])
def test_a_random_rgb_image_is_the_same_yuv444_for_calibration_and_the_camera(tmp_path, rt, layout_rt):
    rgb = _random_rgb(7)
    (tmp_path / "cal").mkdir()
    Image.fromarray(rgb).save(tmp_path / "cal" / "0.png")
    calibration = load_calibration_data(_cfg(tmp_path, "yuv444", "yuv444")).sample(0)["x"]    # (1, 3, H, W)
    camera = to_runtime(rgb.astype(np.float32).transpose(2, 0, 1)[None], _cfg(tmp_path, "rgb", rt, layout_rt=layout_rt).inputs[0])
    if layout_rt == "NHWC":
        camera = camera.transpose(0, 3, 1, 2)
    assert np.array_equal(calibration, camera.astype(np.float32))


def test_many_random_pixels_agree_between_calibration_and_the_camera():
    """The 1-LSB drift (3.8 % of random pixels) between the two RGB -> YUV copies is gone."""
    from hbtool.io.colour import rgb_to_yuv444
    from hbtool.io.images import image_to_train_pixels

    rgb = np.random.default_rng(8).integers(0, 256, (1, 256, 256, 3)).astype(np.float32)
    spec = _cfg(Path("."), "rgb", "yuv444", layout_rt="NHWC").inputs[0]
    camera = to_runtime(rgb.transpose(0, 3, 1, 2), spec)[0]
    yuv_spec = _cfg(Path("."), "yuv444", "yuv444").inputs[0]
    calibration = image_to_train_pixels(rgb[0], yuv_spec)[0].transpose(1, 2, 0)
    assert np.array_equal(calibration, camera.astype(np.float32))
    assert np.array_equal(rgb_to_yuv444(rgb[0]), camera.astype(np.float32))


# ------------------------------------------------------------------------ one place for the formula
#: BT.601 RGB <-> YUV coefficients as floats (the textbook ones and the rounded ones the copies used)
_COEFFICIENTS = {"0.299", "0.587", "0.114", "1.402", "1.772", "0.344136", "0.714136", "0.34414", "0.71414", "0.564",
                 "0.713", "0.168736", "0.331264", "0.418688", "0.081312", "0.1687", "0.3313", "0.4187", "0.0813",
                 "1.164383", "1.596027", "0.391762", "0.812968", "2.017232", "219", "219.0"}
#: integer BT.601 forms (``(66 R + 129 G + 25 B + 128) >> 8``, ``298 (Y - 16)`` ...): numbers seen on one line
_INTEGER_FORMS = ({"66", "129", "25"}, {"-38", "-74", "112"}, {"38", "74", "112"}, {"112", "94", "18"}, {"298", "409"},
                  {"298", "516"}, {"100", "208"})
_HOME = Path("hbtool/kernels/colour.py")


def _number_tokens(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every number in the code (strings and comments are not code)."""
    out, previous = [], None
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type == tokenize.NUMBER:
            text = tok.string.replace("_", "")
            if previous is not None and previous.type == tokenize.OP and previous.string == "-":
                out.append((tok.start[0], "-" + text))
            out.append((tok.start[0], text))
        previous = tok
    return out


def _formula_findings(path: Path, shown: str) -> list[str]:
    numbers = _number_tokens(path)
    found = [f"{shown}:{line}: {text}" for line, text in numbers if text in _COEFFICIENTS]
    by_line: dict[int, set[str]] = {}
    for line, text in numbers:
        by_line.setdefault(line, set()).add(text)
    return found + [f"{shown}:{line}: {' '.join(sorted(form))}" for line, seen in by_line.items()
                    for form in _INTEGER_FORMS if form <= seen]


def test_the_colour_coefficients_are_written_in_one_module_only():
    root = Path(__file__).resolve().parents[3]
    offenders = []
    for path in sorted((root / "hbtool").rglob("*.py")):
        rel = path.relative_to(root)
        if rel != _HOME:
            offenders += _formula_findings(path, str(rel))
    assert not offenders, "an RGB <-> YUV formula outside hbtool/kernels/colour.py (use hbtool.io.colour):\n" + \
        "\n".join(offenders)
    assert _formula_findings(root / _HOME, str(_HOME))     # the one definition: the check sees what it writes


def test_the_check_finds_a_copied_formula(tmp_path):
    copy = tmp_path / "copy.py"
    copy.write_text('''"""Y = 0.299 R in a docstring is not code."""
def luma(r, g, b):
    return 0.299 * r + 0.587 * g + 0.114 * b  # 1.402 in a comment is not code either


def y8(r, g, b):
    return (66 * r + 129 * g + 25 * b + 128) >> 8
''')
    found = _formula_findings(copy, "copy.py")
    assert found == ["copy.py:3: 0.299", "copy.py:3: 0.587", "copy.py:3: 0.114", "copy.py:7: 129 25 66"]


# ------------------------------------------------------------------------------------- one suffix list
@pytest.mark.parametrize("suffix", [".webp", ".tiff", ".ppm"])
def test_every_image_suffix_works_for_calibration(tmp_path, suffix):
    assert suffix in IMAGE_SUFFIXES
    rgb = _random_rgb(9)
    (tmp_path / "cal").mkdir()
    Image.fromarray(rgb).save(tmp_path / "cal" / f"0{suffix}", lossless=True) if suffix == ".webp" else \
        Image.fromarray(rgb).save(tmp_path / "cal" / f"0{suffix}")
    got = load_calibration_data(_cfg(tmp_path, "rgb", "rgb")).sample(0)["x"]
    decoded = np.asarray(Image.open(tmp_path / "cal" / f"0{suffix}").convert("RGB"), np.float32)
    assert np.array_equal(got[0], decoded.transpose(2, 0, 1))
