"""hbtool.api: the library the CLI is built on gives what the CLI gives, prints nothing, and raises HbError with a fix."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hbtool import api
from hbtool.cli import main
from hbtool.errors import ConfigError, HbError, InputError
from tests.helpers import featuremap_config, small_conv_model

ROOT = Path(__file__).resolve().parents[2]
SHAPE = (1, 3, 16, 16)


def _samples(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(n)]


def _config(tmp: Path, working_dir: str = "wd", folder: bool = True, **overrides):
    """A one-input featuremap config on a small conv model, its 8 samples as .npy files when ``folder``."""
    samples = [{"x": x} for x in _samples(8)] if folder else None
    return featuremap_config(tmp, small_conv_model(), samples, working_dir,
                             **{"calibration_parameters.calibration_type": "max", **overrides})


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("api")
    cfg = _config(tmp)
    cal = api.calibrate(cfg)
    art = api.compile(cfg)
    return tmp, cfg, cal, art


def test_compile_result_names_the_artifact_it_wrote(built):
    tmp, cfg, cal, art = built
    assert art.path == tmp / "wd" / "m.bin" and art.path.is_file()
    assert art.path in art.files and (tmp / "wd" / "hb_compile.log") in art.files
    assert art.calibration is None  # calibrated already: compile did not calibrate again
    assert cal.quantized_model.is_file() and cal.method == "max" and cal.num_samples == 8


def test_simulate_equals_the_cli_output_files_bit_for_bit(built, tmp_path):
    _, _, _, art = built
    x = np.concatenate(_samples(5, seed=3))
    outputs = api.simulate(art.path, {"x": x}, batch_size=2)
    np.save(tmp_path / "x.npy", x)
    r = CliRunner().invoke(main, ["simulate", str(art.path), "-i", f"x={tmp_path / 'x.npy'}", "-o", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert set(outputs) == {"y"}
    cli = np.load(tmp_path / "out" / "y.npy")
    assert outputs["y"].dtype == cli.dtype and outputs["y"].shape == cli.shape == (5, 8, 16, 16)
    assert outputs["y"].tobytes() == cli.tobytes()


def test_perf_to_json_equals_perf_json(built):
    _, _, _, art = built
    report = api.perf(art.path)
    r = CliRunner().invoke(main, ["perf", str(art.path), "--json", "-"])
    assert r.exit_code == 0, r.output
    assert report.to_json() == json.loads(r.stdout)
    assert report.latency_ms > 0 and report.fps > 0
    assert report.to_json()["fps"] == round(report.fps, 2)


def test_info_equals_info_json_for_one_model_and_a_packed_artifact(built, tmp_path):
    _, _, _, art = built
    from hbtool.compiler.pack import pack

    packed = tmp_path / "packed.bin"
    packed.write_bytes(pack([art.path]))
    for path, name in ((art.path, None), (packed, None), (packed, "m")):
        described = api.info(path, model_name=name)
        r = CliRunner().invoke(main, ["info", str(path), "--json"] + (["--model-name", name] if name else []))
        assert r.exit_code == 0, r.output
        assert described.to_json() == json.loads(r.stdout)
        assert described.packed == (path == packed and name is None)
    assert [m["name"] for m in api.info(packed).summary["models"]] == ["m"]
    assert api.info(art.path).summary["file"]["bytes"] == art.path.stat().st_size
    with pytest.raises(HbError):
        api.info(tmp_path / "missing.bin")


def test_calibrate_on_arrays_gives_the_model_of_the_same_arrays_in_a_folder(built, tmp_path):
    tmp, _, folder_run, _ = built
    cfg = _config(tmp, working_dir="wd_arrays", folder=False)
    given = api.calibrate(cfg, data=[{"x": x} for x in _samples(8)])
    assert given.num_samples == 8
    assert given.quantized_model.read_bytes() == folder_run.quantized_model.read_bytes()
    assert given.calibrated_model.read_bytes() == folder_run.calibrated_model.read_bytes()
    assert given.files["quant_info"].read_text() == folder_run.files["quant_info"].read_text()


def test_calibrate_data_without_the_batch_axis_and_from_a_generator(built):
    tmp, _, folder_run, _ = built
    cfg = _config(tmp, working_dir="wd_gen", folder=False)
    given = api.calibrate(cfg, data=({"x": x[0]} for x in _samples(8)))
    assert given.quantized_model.read_bytes() == folder_run.quantized_model.read_bytes()


def test_library_prints_nothing_to_stdout(tmp_path, capfd):
    cfg = _config(tmp_path)
    api.check(cfg).require_deployable()
    result = api.makertbin(cfg)
    outputs = api.simulate(result.path, {"x": np.concatenate(_samples(2))})
    report = api.perf(result.path)
    out, _ = capfd.readouterr()
    assert out == ""
    assert result.path.is_file() and outputs["y"].shape[0] == 2 and report.fps > 0
    assert (tmp_path / "wd" / ".hb_check" / "checker.json").is_file()


def test_overrides_dotted_and_nested_are_the_same_config(tmp_path):
    a = _config(tmp_path, **{"calibration_parameters.num_samples": 4, "model_parameters.march": "bayes-e"})
    b = _config(tmp_path, calibration_parameters={"num_samples": 4}, model_parameters={"march": "bayes-e"})
    assert a.calibration.num_samples == b.calibration.num_samples == 4
    assert a.model.march == b.model.march == "bayes-e"


@pytest.mark.parametrize("overrides, where", [
    ({"calibration_parameters.calibration_type": "bogus"}, "calibration_parameters.calibration_type"),
    ({"calibration_parameters.num_sample": 4}, "calibration_parameters.num_sample"),
    ({"num_samples": 4}, "num_samples"),
])
def test_bad_override_is_a_config_error_with_a_fix(tmp_path, overrides, where):
    with pytest.raises(ConfigError) as info:
        _config(tmp_path, **overrides)
    assert where in info.value.problem and info.value.fix
    assert info.value.exit_code == 2


def test_bad_yaml_path_is_a_config_error_with_a_fix(tmp_path):
    with pytest.raises(HbError) as info:
        api.load_config(tmp_path / "missing.yaml")
    assert info.value.fix and "missing.yaml" in info.value.problem


@pytest.mark.parametrize("data, problem", [
    ([{"input": np.zeros(SHAPE, np.float32)}], "no input 'input'"),
    ([{"x": np.zeros((1, 3, 8, 8), np.float32)}], "does not fit"),
    ([{"x": np.full(SHAPE, np.nan, np.float32)}], "NaN"),
    ([], "no samples"),
    ({"x": np.zeros(SHAPE, np.float32)}, "not an iterable of samples"),
])
def test_bad_calibration_data_is_an_input_error_with_a_fix(tmp_path, data, problem):
    cfg = _config(tmp_path, folder=False)
    with pytest.raises(InputError) as info:
        api.calibrate(cfg, data=data)
    assert problem in info.value.problem and info.value.fix
    assert not (tmp_path / "wd").exists() or not any((tmp_path / "wd").iterdir())  # nothing half-written


def test_simulate_checks_array_shapes(built):
    _, _, _, art = built
    with pytest.raises(InputError, match="does not fit"):
        api.simulate(art.path, {"x": np.zeros((2, 3, 8, 8), np.float32)})


def _docs_example() -> str:
    text = (ROOT / "docs" / "api.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 1, "docs/api.md keeps exactly one runnable python block"
    return blocks[0]


def test_docs_api_example_runs(tmp_path):
    """The example in docs/api.md, run as written from a folder holding configs/ and samples/ (the repository's)."""
    for name in ("configs", "samples"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / "example.py").write_text(_docs_example())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "top-1" in r.stdout and "fps" in r.stdout
    assert (tmp_path / "api_example" / "tiny_cnn.bin").is_file()
