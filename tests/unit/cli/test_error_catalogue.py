"""The error catalogue: every bad input a user can give ``checker`` / ``calibrate``, through the real CLI.

Each scenario runs in a fresh folder (``tmp_path``, also the current folder) that holds the
user's inputs (a copy of the tiny CNN, a config, a few calibration images) and the output
folders. The contract asserted for every one:

* exit code 2 for bad input (1 for a valid model that cannot be deployed);
* the output is exactly one line on stderr, ``hbtool: error: <problem>; fix: <what to do>``,
  naming the problem; nothing on stdout (the exit-1 checker case prints its report);
* no ``Traceback`` anywhere;
* the folder is byte for byte as before: no output, no partial or temporary file, no new
  empty folder, inputs untouched.

The cases that need a monkeypatch (full disk, Ctrl-C) and the re-run checks follow the table.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import pytest
import yaml
from click.testing import CliRunner
from onnx import TensorProto, helper

from hbtool.cli import main
from tests.helpers import make_model, tensor, vinfo

ROOT = Path(__file__).resolve().parents[3]
PNGS = sorted((ROOT / "samples" / "data" / "digits_cal").glob("*.png"))[:8]
OUTPUTS = ("original_float_model.onnx", "optimized_float_model.onnx", "calibrated_model.onnx", "quantized_model.onnx", "quant_info.json")


# ------------------------------------------------------------------------------ workspace
@dataclass
class Workspace:
    root: Path

    @property
    def inp(self) -> Path:
        return self.root / "in"

    @property
    def model(self) -> Path:
        return self.inp / "tiny_cnn.onnx"

    @property
    def cal(self) -> Path:
        return self.inp / "cal"

    @property
    def cfg(self) -> Path:
        return self.inp / "tiny_cnn.yaml"

    @property
    def wd(self) -> Path:
        return self.root / "out" / "wd"

    def config(self, edit: Callable[[dict], None] | None = None, text: str | None = None) -> Path:
        """The tiny CNN config (absolute paths, calibration_type max), edited, written to ``self.cfg``."""
        data = yaml.safe_load((ROOT / "configs" / "tiny_cnn.yaml").read_text())
        data["model_parameters"]["onnx_model"] = str(self.model)
        data["model_parameters"]["working_dir"] = str(self.wd)
        data["calibration_parameters"]["cal_data_dir"] = str(self.cal)
        data["calibration_parameters"]["calibration_type"] = "max"
        if edit is not None:
            edit(data)
        self.cfg.write_text(text if text is not None else yaml.safe_dump(data))
        return self.cfg

    def featuremap_config(self, model: Path, name: str, shape: str, cal: Path) -> Path:
        """A config for a featuremap model (no preprocessing) with ``.npy`` calibration data."""
        data = {
            "model_parameters": {"onnx_model": str(model), "working_dir": str(self.wd), "output_model_file_prefix": "m"},
            "input_parameters": {"input_name": name, "input_shape": shape, "input_type_train": "featuremap",
                                 "input_type_rt": "featuremap", "norm_type": "no_preprocess"},
            "calibration_parameters": {"cal_data_dir": str(cal), "calibration_type": "max"},
        }
        self.cfg.write_text(yaml.safe_dump(data))
        return self.cfg

    def npy_dir(self, name: str, arrays: list[np.ndarray]) -> Path:
        d = self.inp / name
        d.mkdir()
        for k, a in enumerate(arrays):
            np.save(d / f"{k}.npy", a)
        return d


@pytest.fixture
def ws(tmp_path, monkeypatch) -> Workspace:
    w = Workspace(tmp_path)
    w.cal.mkdir(parents=True)
    shutil.copy(ROOT / "samples" / "tiny" / "tiny_cnn.onnx", w.model)
    for p in PNGS:
        shutil.copy(p, w.cal)
    (tmp_path / "out").mkdir()
    monkeypatch.chdir(tmp_path)  # a default output folder (.hb_check) would land in the snapshot
    monkeypatch.setattr(sys, "argv", ["hbtool"])  # the CLI reads -v from argv: not pytest's
    return w


def snapshot(root: Path) -> dict[str, str]:
    """Every file (hidden ones included) and folder under ``root``: path -> sha256 or '<dir>'."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = "<dir>"
        for f in filenames:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, root)] = hashlib.sha256(Path(p).read_bytes()).hexdigest()
    return out


def invoke(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_one_line_error(r, code: int, *needles: str, stdout_empty: bool = True) -> str:
    everything = r.output + r.stderr
    assert "Traceback" not in everything, everything
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == code, everything
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and r.stderr.endswith("\n"), r.stderr
    line = lines[0]
    assert line.startswith("hbtool: error: ") and "; fix: " in line, line
    for n in needles:
        assert n in line, (n, line)
    if stdout_empty:
        assert r.stdout == "", r.stdout
    return line


# ------------------------------------------------------------------------------ the scenarios
# Each builds its inputs in the workspace and returns (argv, exit code, needles). They are run
# by one test (below) that snapshots the folder around the CLI call.
def cfg_malformed_yaml(ws):
    return ["calibrate", "-c", ws.config(text="model_parameters:\n  onnx_model: [tiny_cnn.onnx\n")], 2, ["invalid YAML at line", "tiny_cnn.yaml"]


def cfg_tab_indentation(ws):
    return ["calibrate", "-c", ws.config(text="model_parameters:\n\tonnx_model: tiny_cnn.onnx\n")], 2, ["invalid YAML at line 2", "'\\t'"]


def cfg_duplicate_key(ws):
    text = f"model_parameters:\n  onnx_model: {ws.model}\n  onnx_model: other.onnx\n"
    return ["calibrate", "-c", ws.config(text=text)], 2, ["'onnx_model' appears twice", "line 2"]


def cfg_top_level_not_a_mapping(ws):
    return ["calibrate", "-c", ws.config(text="- model_parameters\n- input_parameters\n")], 2, ["top level must be a mapping"]


def cfg_misspelled_group(ws):
    def edit(d):
        d["calibration_parameter"] = d.pop("calibration_parameters")
    return ["calibrate", "-c", ws.config(edit)], 2, ["calibration_parameter: unknown group", "did you mean 'calibration_parameters'"]


def cfg_misspelled_key(ws):
    def edit(d):
        d["calibration_parameters"]["calibraton_type"] = d["calibration_parameters"].pop("calibration_type")
    return ["calibrate", "-c", ws.config(edit)], 2, ["calibration_parameters.calibraton_type", "did you mean 'calibration_type'"]


def cfg_key_in_wrong_group(ws):
    def edit(d):
        d["model_parameters"]["cal_data_dir"] = d["calibration_parameters"].pop("cal_data_dir")
    return ["calibrate", "-c", ws.config(edit)], 2, ["model_parameters.cal_data_dir", "belongs to calibration_parameters"]


def cfg_bool_of_wrong_type(ws):
    return ["calibrate", "-c", ws.config(lambda d: d["calibration_parameters"].update(per_channel="maybe"))], 2, ["calibration_parameters.per_channel", "true or false", "'maybe'"]


def cfg_number_of_wrong_type(ws):
    return ["calibrate", "-c", ws.config(lambda d: d["calibration_parameters"].update(max_percentile="high"))], 2, ["calibration_parameters.max_percentile", "expected a number"]


def cfg_integer_of_wrong_type(ws):
    return ["calibrate", "-c", ws.config(lambda d: d["compiler_parameters"].update(core_num="one"))], 2, ["compiler_parameters.core_num", "expected an integer"]


def cfg_unknown_enum_value(ws):
    return ["calibrate", "-c", ws.config(lambda d: d["calibration_parameters"].update(calibration_type="kll"))], 2, ["calibration_type", "'kll'", "did you mean 'kl'"]


def cfg_lists_of_different_lengths(ws):
    return ["calibrate", "-c", ws.config(lambda d: d["input_parameters"].update(input_name="input;mask"))], 2, ["input_parameters.input_shape", "has 1 entry but input_parameters.input_name has 2"]


def cfg_mean_value_count(ws):
    return ["calibrate", "-c", ws.config(lambda d: d["input_parameters"].update(mean_value="127.5 127.5"))], 2, ["input_parameters.mean_value", "2 values given but the input has 3 channels"]


def cfg_input_type_rt_unsupported(ws):
    return ["calibrate", "-c", ws.config(lambda d: d["input_parameters"].update(input_type_rt="rgbp"))], 2, ["input_type_rt", "'rgbp' is not one of"]


def cfg_file_missing(ws):
    return ["calibrate", "-c", ws.inp / "nope.yaml"], 2, ["nope.yaml", "config file not found"]


def cli_config_option_missing(ws):
    return ["calibrate"], 2, ["Missing option '-c' / '--config'", "calibrate --help"]


def cli_flag_value_of_wrong_type(ws):
    return ["calibrate", "-c", ws.config(), "--max-rows", "many"], 2, ["--max-rows", "'many' is not a valid integer"]


def cli_count_below_its_range(ws):
    """A negative row count was accepted and quietly printed everything; counts are range-checked."""
    return ["checker", "-m", ws.model, "--max-rows", "-3"], 2, ["--max-rows", "-3 is not in the range x>=0"]


def cli_input_shape_not_a_shape(ws):
    return ["checker", "-m", ws.model, "--input-shape", "input", "3by32", "--output-dir", ws.root / "out" / "chk"], 2, ["--input-shape input 3by32: not a shape"]


def model_missing(ws):
    return ["calibrate", "-c", ws.config(lambda d: d["model_parameters"].update(onnx_model=str(ws.inp / "gone.onnx")))], 2, ["model_parameters.onnx_model", "gone.onnx", "not found"]


def model_not_onnx_bytes(ws):
    junk = ws.inp / "junk.onnx"
    junk.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    return ["calibrate", "-c", ws.config(lambda d: d["model_parameters"].update(onnx_model=str(junk)))], 2, ["junk.onnx", "is not a readable ONNX model"]


def model_fails_onnx_checker(ws):
    bad = ws.inp / "bad.onnx"
    onnx.save(make_model([helper.make_node("Relu", ["nowhere"], ["y"], name="r")], [vinfo("x", [1, 4])], [vinfo("y", [1, 4])]), str(bad))
    return ["checker", "-m", bad, "--output-dir", ws.root / "out" / "chk"], 2, ["the ONNX checker rejects the model", "input 'nowhere' of node: name: r OpType: Relu is not output of any previous nodes"]


def model_opset_too_old(ws):
    old = ws.inp / "op7.onnx"
    onnx.save(make_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vinfo("x", [1, 4])], [vinfo("y", [1, 4])], opset=7), str(old))
    return ["checker", "-m", old, "--output-dir", ws.root / "out" / "chk"], 2, ["opset 7", "opset_version between 11 and"]


def model_dynamic_shape_not_given(ws):
    dyn = ws.inp / "dyn.onnx"
    onnx.save(make_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vinfo("x", ["batch", 4])], [vinfo("y", ["batch", 4])]), str(dyn))
    return ["checker", "-m", dyn, "--output-dir", ws.root / "out" / "chk"], 2, ["input 'x' has dynamic dimension", "--input-shape x"]


def model_input_name_unknown_cli(ws):
    return ["checker", "-m", ws.model, "--input-shape", "image", "1x3x32x32", "--output-dir", ws.root / "out" / "chk"], 2, ["input 'image'", "does not exist in the model", "inputs: input"]


def model_input_name_unknown_config(ws):
    return ["calibrate", "-c", ws.config(lambda d: d["input_parameters"].update(input_name="image"))], 2, ["input 'image'", "does not exist in the model"]


def model_input_rank_mismatch(ws):
    return ["checker", "-m", ws.model, "--input-shape", "input", "1x3x32", "--output-dir", ws.root / "out" / "chk"], 2, ["has rank 4 in the model", "1x3x32 has rank 3"]


def model_custom_domain_op_checker(ws):
    from samples.warts import build_custom_op

    path = build_custom_op(ws.inp / "custom.onnx", with_function=False)
    return ["checker", "-m", path, "--output-dir", ws.root / "out" / "chk"], 2, ["node 'MyOp_0'", "custom domain 'com.example'"]


def model_custom_domain_op_calibrate(ws):
    from samples.warts import build_custom_op

    path = build_custom_op(ws.inp / "custom.onnx", with_function=False)
    cal = ws.npy_dir("feat", [np.zeros((1, 3, 16, 16), np.float32)])
    return ["calibrate", "-c", ws.featuremap_config(path, "input", "1x3x16x16", cal)], 2, ["custom domain 'com.example'"]


def model_string_input(ws):
    path = ws.inp / "text.onnx"
    onnx.save(make_model([helper.make_node("Identity", ["s"], ["y"], name="id")], [vinfo("s", [1, 4], TensorProto.STRING)], [vinfo("y", [1, 4], TensorProto.STRING)]), str(path))
    return ["checker", "-m", path, "--output-dir", ws.root / "out" / "chk"], 2, ["input 's' has element type string"]


def model_complex_input(ws):
    path = ws.inp / "complex.onnx"
    onnx.save(make_model([helper.make_node("Identity", ["z"], ["y"], name="id")], [vinfo("z", [1, 4], TensorProto.COMPLEX64)], [vinfo("y", [1, 4], TensorProto.COMPLEX64)]), str(path))
    cal = ws.npy_dir("feat", [np.zeros((1, 4), np.float32)])
    return ["calibrate", "-c", ws.featuremap_config(path, "z", "1x4", cal)], 2, ["input 'z' has element type complex64"]


def _cpu_only_model(ws) -> Path:
    path = ws.inp / "cumsum.onnx"
    nodes = [helper.make_node("CumSum", ["x", "axis"], ["y"], name="cumsum")]
    onnx.save(make_model(nodes, [vinfo("x", [1, 4])], [vinfo("y", [1, 4])], [tensor("axis", np.array(1, np.int64))]), str(path))
    return path


def model_nothing_for_the_bpu_calibrate(ws):
    cal = ws.npy_dir("feat", [np.ones((1, 4), np.float32)])
    return ["calibrate", "-c", ws.featuremap_config(_cpu_only_model(ws), "x", "1x4", cal)], 1, ["no node of the model can run on the BPU", "hbtool checker"]


def data_dir_empty(ws):
    empty = ws.inp / "empty"
    empty.mkdir()
    return ["calibrate", "-c", ws.config(lambda d: d["calibration_parameters"].update(cal_data_dir=str(empty)))], 2, ["empty", str(empty)]


def data_dir_missing(ws):
    return ["calibrate", "-c", ws.config(lambda d: d["calibration_parameters"].update(cal_data_dir=str(ws.inp / "nope")))], 2, ["cal_data_dir", "nope"]


def data_image_undecodable(ws):
    (ws.cal / "cal_99_broken.png").write_bytes(b"\x89PNG\r\n\x1a\nthis is not the rest of a png")
    return ["calibrate", "-c", ws.config()], 2, ["cal_99_broken.png", "cannot be decoded"]


def _image_npys(ws, name: str, bad: Callable[[np.ndarray], np.ndarray] | None = None) -> Path:
    arrays = [np.full((1, 3, 32, 32), 100.0 + k, np.float32) for k in range(3)]
    if bad is not None:
        arrays[1] = bad(arrays[1])
    return ws.npy_dir(name, arrays)


def data_nan(ws):
    def nan(a):
        a[0, 1, 2, 3] = np.nan
        return a
    d = _image_npys(ws, "nan", nan)
    return ["calibrate", "-c", ws.config(lambda c: c["calibration_parameters"].update(cal_data_dir=str(d)))], 2, ["1.npy", "1 of 3072 values are NaN or Inf"]


def data_inf(ws):
    def inf(a):
        a[0, 0, :2, 0] = [np.inf, -np.inf]
        return a
    d = _image_npys(ws, "inf", inf)
    return ["calibrate", "-c", ws.config(lambda c: c["calibration_parameters"].update(cal_data_dir=str(d)))], 2, ["1.npy", "2 of 3072 values are NaN or Inf"]


def data_npy_wrong_shape(ws):
    d = _image_npys(ws, "shape", lambda a: np.zeros((1, 3, 16, 16), np.float32))
    return ["calibrate", "-c", ws.config(lambda c: c["calibration_parameters"].update(cal_data_dir=str(d)))], 2, ["1.npy", "(1, 3, 16, 16)"]


def data_npy_wrong_dtype(ws):
    d = _image_npys(ws, "dtype", lambda a: a.astype(np.complex64))
    return ["calibrate", "-c", ws.config(lambda c: c["calibration_parameters"].update(cal_data_dir=str(d)))], 2, ["1.npy", "complex64"]


def data_npy_not_whole_numbers_for_int_input(ws):
    path = ws.inp / "ids.onnx"
    table = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"), helper.make_node("Relu", ["e"], ["y"], name="relu")]
    onnx.save(make_model(nodes, [vinfo("ids", [1, 6], TensorProto.INT64)], [vinfo("y", [1, 6, 4])], [tensor("table", table)]), str(path))
    cal = ws.npy_dir("ids", [np.arange(6, dtype=np.int64)[None], np.full((1, 6), 2.5)])
    return ["calibrate", "-c", ws.featuremap_config(path, "ids", "1x6", cal)], 2, ["1.npy", "not whole numbers", "int64"]


def data_bin_wrong_size(ws):
    d = ws.inp / "bin"
    d.mkdir()
    np.zeros(3 * 32 * 32, np.uint8).tofile(d / "0.bin")
    np.zeros(3 * 32 * 32 - 5, np.uint8).tofile(d / "1.bin")
    return ["calibrate", "-c", ws.config(lambda c: c["calibration_parameters"].update(cal_data_dir=str(d)))], 2, ["1.bin", "3067 bytes", "3072 bytes"]


def data_node_info_unknown_node_calibrate(ws):
    return ["calibrate", "-c", ws.config(lambda d: d["model_parameters"].update(node_info={"no_such_node": {"ON": "CPU"}}))], 2, ["node_info", "'no_such_node'", "not in the model"]


def data_node_info_unknown_node_checker(ws):
    cfg = ws.config(lambda d: d["model_parameters"].update(node_info={"conv_typo": "int16"}))
    return ["checker", "-c", cfg, "--output-dir", ws.root / "out" / "chk"], 2, ["node_info", "'conv_typo'", "not in the model"]


def _unwritable(ws, folder: Path) -> tuple[Path, str]:
    """A folder hbtool cannot write into: read-only (chmod) or, as root, a path below a regular file."""
    if os.geteuid() == 0:  # root ignores permission bits
        blocker = ws.root / "out" / "blocked"
        blocker.write_text("a regular file where a folder is expected\n")
        return blocker / folder.name, "is a file, not a folder"
    ro = ws.root / "out" / "readonly"
    ro.mkdir()
    ro.chmod(0o500)
    return ro / folder.name, "Permission denied"


def out_working_dir_not_writable(ws):
    wd, why = _unwritable(ws, ws.wd)
    return ["calibrate", "-c", ws.config(lambda d: d["model_parameters"].update(working_dir=str(wd)))], 2, ["cannot write", why]


def out_working_dir_is_a_file(ws):
    f = ws.root / "out" / "wd_file"
    f.write_text("not a folder\n")
    return ["calibrate", "-c", ws.config(lambda d: d["model_parameters"].update(working_dir=str(f)))], 2, ["cannot write", "wd_file' is a file, not a folder"]


def out_checker_dir_not_writable(ws):
    out, why = _unwritable(ws, ws.root / "chk")
    return ["checker", "-m", ws.model, "--output-dir", out], 2, ["cannot write", why]


CASES = [
    cfg_malformed_yaml, cfg_tab_indentation, cfg_duplicate_key, cfg_top_level_not_a_mapping, cfg_misspelled_group,
    cfg_misspelled_key, cfg_key_in_wrong_group, cfg_bool_of_wrong_type, cfg_number_of_wrong_type, cfg_integer_of_wrong_type,
    cfg_unknown_enum_value, cfg_lists_of_different_lengths, cfg_mean_value_count, cfg_input_type_rt_unsupported, cfg_file_missing,
    cli_config_option_missing, cli_flag_value_of_wrong_type, cli_count_below_its_range, cli_input_shape_not_a_shape,
    model_missing, model_not_onnx_bytes, model_fails_onnx_checker, model_opset_too_old, model_dynamic_shape_not_given,
    model_input_name_unknown_cli, model_input_name_unknown_config, model_input_rank_mismatch, model_custom_domain_op_checker,
    model_custom_domain_op_calibrate, model_string_input, model_complex_input, model_nothing_for_the_bpu_calibrate,
    data_dir_empty, data_dir_missing, data_image_undecodable, data_nan, data_inf, data_npy_wrong_shape, data_npy_wrong_dtype,
    data_npy_not_whole_numbers_for_int_input, data_bin_wrong_size, data_node_info_unknown_node_calibrate,
    data_node_info_unknown_node_checker,
    out_working_dir_not_writable, out_working_dir_is_a_file, out_checker_dir_not_writable,
]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_bad_input_is_one_line_and_writes_nothing(ws, case):
    argv, code, needles = case(ws)
    before = snapshot(ws.root)
    r = invoke(*argv)
    assert_one_line_error(r, code, *needles)
    assert snapshot(ws.root) == before


# ------------------------------------------------------------------------------ designed non-errors
def test_checker_on_a_model_with_nothing_for_the_bpu_exits_1_with_a_complete_report(ws):
    """Valid but not deployable: exit 1, one error line, and the report (complete) says why."""
    out = ws.root / "out" / "chk"
    r = invoke("checker", "-m", _cpu_only_model(ws), "--output-dir", out)
    assert_one_line_error(r, 1, "no node of the model can run on the BPU", stdout_empty=False)
    assert "CumSum" in r.stdout and "CPU" in r.stdout
    assert sorted(p.name for p in out.iterdir()) == ["checker.json", "cumsum_optimized_float_model.onnx"]
    doc = json.loads((out / "checker.json").read_text())
    assert doc["summary"]["bpu_nodes"] == 0 and doc["nodes"][0]["reason"]
    onnx.checker.check_model(onnx.load(str(out / "cumsum_optimized_float_model.onnx")))


def test_custom_domain_op_with_a_function_body_is_inlined_not_refused(ws):
    """The designed behaviour for a custom-domain node: refused (above) unless the model carries its body."""
    from samples.warts import build_custom_op

    path = build_custom_op(ws.inp / "custom_fn.onnx", with_function=True)
    r = invoke("checker", "-m", path, "--output-dir", ws.root / "out" / "chk")
    assert r.exit_code == 0, r.output
    doc = json.loads((ws.root / "out" / "chk" / "checker.json").read_text())
    assert "MyOp" not in {n["op_type"] for n in doc["nodes"]}


# ------------------------------------------------------------------------------ disk full, Ctrl-C, re-runs
def _calibrate_ok(ws) -> dict[str, bytes]:
    r = invoke("calibrate", "-c", ws.config())
    assert r.exit_code == 0, r.output
    return {p.name: p.read_bytes() for p in ws.wd.iterdir()}


def _disk_fills_up(monkeypatch, after_files: int):
    """Make the low-level write of hbtool.utils.atomic fail with ENOSPC half-way through file ``after_files``."""
    import hbtool.utils.atomic as atomic

    real = atomic._write_all
    calls = []

    def write(fd, data):
        calls.append(len(data))
        if len(calls) > after_files:
            real(fd, data[: len(data) // 2])  # part of it reaches the disk, then the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, data)

    monkeypatch.setattr(atomic, "_write_all", write)
    return calls


@pytest.mark.parametrize("after_files", [0, 5], ids=["first_file", "last_file"])
def test_disk_full_keeps_the_earlier_outputs(ws, monkeypatch, after_files):
    earlier = _calibrate_ok(ws)
    ws.config(lambda d: d["calibration_parameters"].update(calibration_type="percentile"))  # a run with other results
    before = snapshot(ws.root)
    calls = _disk_fills_up(monkeypatch, after_files)
    r = invoke("calibrate", "-c", ws.cfg)
    line = assert_one_line_error(r, 2, "disk full", "no space left on the disk mounted at '", "while writing '")
    assert len(calls) == after_files + 1
    assert snapshot(ws.root) == before  # no temporary file, no half file
    assert {p.name: p.read_bytes() for p in ws.wd.iterdir()} == earlier
    assert "working_dir" in line


def test_disk_full_in_checker_keeps_the_earlier_report(ws, monkeypatch):
    out = ws.root / "out" / "chk"
    assert invoke("checker", "-m", ws.model, "--output-dir", out).exit_code == 0
    before = snapshot(ws.root)
    _disk_fills_up(monkeypatch, 1)  # the model is written, checker.json is not
    r = invoke("checker", "-m", ws.model, "--output-dir", out, "--max-rows", "2")
    assert_one_line_error(r, 2, "disk full", "checker.json")
    assert snapshot(ws.root) == before


def test_disk_full_on_a_fresh_run_leaves_no_empty_working_dir(ws, monkeypatch):
    ws.config()
    before = snapshot(ws.root)
    _disk_fills_up(monkeypatch, 2)
    assert_one_line_error(invoke("calibrate", "-c", ws.cfg), 2, "disk full")
    assert snapshot(ws.root) == before and not ws.wd.exists()


def test_ctrl_c_during_statistics_writes_nothing(ws, monkeypatch):
    import hbtool.quant.calibrate as calibrate_mod

    real = calibrate_mod.collect_stats
    seen = []

    def interrupted(graph, tensors, batches, *args, **kwargs):
        def batches_then_ctrl_c():
            for k, b in enumerate(batches):
                if k == 3:
                    raise KeyboardInterrupt
                seen.append(k)
                yield b
        return real(graph, tensors, batches_then_ctrl_c(), *args, **kwargs)

    monkeypatch.setattr(calibrate_mod, "collect_stats", interrupted)
    ws.config(lambda d: d["calibration_parameters"].update(batch_size=1))  # one sample per statistics step
    before = snapshot(ws.root)
    r = invoke("calibrate", "-c", ws.cfg)
    assert_one_line_error(r, 2, "interrupted", "run the command again")
    assert seen == [0, 1, 2]  # it was stopped mid-statistics
    assert snapshot(ws.root) == before


def test_ctrl_c_while_writing_keeps_the_earlier_outputs(ws, monkeypatch):
    import hbtool.utils.atomic as atomic

    earlier = _calibrate_ok(ws)
    before = snapshot(ws.root)
    real = atomic._write_all
    calls = []

    def write(fd, data):
        calls.append(1)
        if len(calls) == 4:
            real(fd, data[:100])
            raise KeyboardInterrupt
        real(fd, data)

    monkeypatch.setattr(atomic, "_write_all", write)
    assert_one_line_error(invoke("calibrate", "-c", ws.cfg), 2, "interrupted")
    assert snapshot(ws.root) == before
    assert {p.name: p.read_bytes() for p in ws.wd.iterdir()} == earlier


def test_rerun_replaces_its_own_outputs_completely_and_never_touches_inputs(ws):
    ws.config()
    inputs_before = snapshot(ws.inp)  # model, config, calibration images
    first = _calibrate_ok(ws)
    assert set(first) == {"tiny_cnn_" + s for s in OUTPUTS} | {"hb_calibrate.log"}
    # damage every output (a truncated copy, a hand edit) and keep a file of the user's beside them
    for name, data in first.items():
        (ws.wd / name).write_bytes(data[: len(data) // 3])
    (ws.wd / "notes.txt").write_text("mine\n")
    second = _calibrate_ok(ws)
    assert set(second) == set(first) | {"notes.txt"}
    for name in first:
        if name == "hb_calibrate.log":
            assert _without_durations(second[name]) == _without_durations(first[name])
        else:
            assert second[name] == first[name], name
    assert second["notes.txt"] == b"mine\n"
    assert snapshot(ws.inp) == inputs_before
    assert ws.model.read_bytes() == (ROOT / "samples" / "tiny" / "tiny_cnn.onnx").read_bytes()


def _without_durations(log: bytes) -> bytes:
    import re

    return re.sub(rb"time: [0-9.]+s", b"time: <t>s", log)
