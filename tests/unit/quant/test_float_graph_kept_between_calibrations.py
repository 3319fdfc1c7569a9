"""``run_calibration``'s ``stats_cache`` keeps the imported and optimized float graph (it does not depend on
``node_info``): a later calibration with another ``node_info`` copies it instead of importing and optimizing the
model again (``hbtool debug``'s tries), and gives the very bytes a fresh calibration gives."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from hbtool.config import load_config
from hbtool.ir.onnx_export import to_onnx
from hbtool.quant import calibrate as cal

ROOT = Path(__file__).resolve().parents[3]


def _config(tmp_path: Path):
    data = yaml.safe_load((ROOT / "configs" / "tiny_cnn.yaml").read_text())
    data["model_parameters"]["onnx_model"] = str(ROOT / "samples" / "tiny" / "tiny_cnn.onnx")
    data["model_parameters"]["working_dir"] = str(tmp_path / "wd")
    data["calibration_parameters"]["cal_data_dir"] = str(ROOT / "samples" / "data" / "digits_cal")
    data["calibration_parameters"].update(calibration_type="max", auto_int16=False)
    path = tmp_path / "tiny_cnn.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


def _with_node_info(cfg, node_info):
    cfg = copy.copy(cfg)
    cfg.model = copy.copy(cfg.model)
    cfg.model.node_info = node_info
    return cfg


def _bytes(result) -> tuple[bytes, bytes]:
    return (to_onnx(result.calibrated, stage="calibrated").SerializeToString(),
            to_onnx(result.quantized, stage="quantized").SerializeToString())


def test_a_kept_float_graph_gives_the_bytes_of_a_fresh_calibration(tmp_path, monkeypatch):
    cfg = _config(tmp_path)
    cache: dict = {}
    first = cal.run_calibration(cfg, stats_cache=cache, evaluate=False)
    node = next(n.name for n in first.graph.nodes if n.meta.get("on") == "BPU" and n.op_type == "Conv")
    variant = _with_node_info(cfg, {node: {"OutputType": "int16"}})
    fresh = cal.run_calibration(variant, evaluate=False)

    built = []
    real = cal._optimized_float_graph
    monkeypatch.setattr(cal, "_optimized_float_graph", lambda *a: built.append(1) or real(*a))
    kept = cal.run_calibration(variant, stats_cache=cache, evaluate=False)
    assert built == []                     # the kept graph was copied, not built again
    assert _bytes(kept) == _bytes(fresh)   # and the placement read the new node_info: int16 where it says
    assert _bytes(kept) != _bytes(first)
    again = cal.run_calibration(cfg, stats_cache=cache, evaluate=False)
    assert _bytes(again) == _bytes(first)  # the kept graph was not changed by the calls that copied it


def test_another_model_is_not_served_the_kept_graph(tmp_path, monkeypatch):
    cfg = _config(tmp_path)
    cache: dict = {}
    cal.run_calibration(cfg, stats_cache=cache, evaluate=False)
    other = _with_node_info(cfg, {})
    other.inputs = [copy.copy(i) for i in cfg.inputs]
    other.inputs[0].mean = tuple(m + 1.0 for m in other.inputs[0].mean) if other.inputs[0].mean else (1.0,)
    built = []
    real = cal._optimized_float_graph
    monkeypatch.setattr(cal, "_optimized_float_graph", lambda *a: built.append(1) or real(*a))
    cal.prepare_float_graph(other, cache=cache)
    assert built == [1]
