"""No key is accepted and ignored: the whole key table (schema.GROUPS), checked at run time.

Every config object's attribute reads are recorded while makertbin (checker, calibrate,
compile), simulate and perf run on a tiny model whose config sets every key to a value other
than its default. A key passes when a stage outside hbtool/config read it, when the loader
merges it into a key that is read (run_on_cpu, run_on_bpu, set_node_data_type -> node_info),
or when any non-default value of it is refused with an error naming it. A new key that no
stage reads fails here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from hbtool.config import schema as S
from hbtool.config import config_from_dict, types as T
from hbtool.config.loader import INPUT_FIELDS, INPUT_GLOBAL_FIELDS
from hbtool.errors import ConfigError
from tests.helpers import make_model, tensor, vinfo

HBTOOL = str(Path(S.__file__).resolve().parents[1])
CONFIG_DIR = str(Path(S.__file__).resolve().parent)

# keys the loader folds into another field (that field's reads count for them)
MERGED = {"run_on_cpu": [("ModelParams", "node_info")], "run_on_bpu": [("ModelParams", "node_info")],
          "set_node_data_type": [("ModelParams", "node_info")],
          "input_source": [("InputSpec", "source")]}  # resolved per input by the loader
# HbConfig methods (in hbtool/config) that stages call: each stands for the fields it reads
METHOD_READS = {"require_calibration_data": [("InputSpec", "cal_data_dir")], "require_model": [("ModelParams", "onnx_model")]}
# keys whose every non-default value is refused with an error naming the key
REFUSED = {
    ("input_parameters", "input_batch"): 4,
    ("input_parameters", "separate_batch"): True,
    ("compiler_parameters", "max_time_per_fc"): 2000,
}
# keys whose stage belongs to work in flight elsewhere (issue 17, runtime input types)
PENDING: dict[str, str] = {}
# groups read by their own command, each walked by its own test below (hbtool qat)
OWN_COMMAND_GROUPS = ("qat_parameters", "debug_parameters", "gate_parameters")
# the model: caffe keys are refused by the table itself (Key.unsupported)


def _tiny_model(path: Path) -> None:
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
    w2 = rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2
    nodes = [
        helper.make_node("Conv", ["images", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c2"], ["s"], name="sig"),
        helper.make_node("Transpose", ["s"], ["y"], name="tr", perm=[0, 2, 3, 1]),
    ]
    onnx.save(make_model(nodes, [vinfo("images", [1, 3, 16, 16])], [vinfo("y", [1, 16, 16, 8])],
                         [tensor("w1", w1), tensor("w2", w2)], opset=13), path)


def _every_key_config(tmp: Path) -> dict:
    _tiny_model(tmp / "tiny.onnx")
    cal = tmp / "cal"
    cal.mkdir()
    rng = np.random.default_rng(1)
    for k in range(3):
        rng.uniform(0, 255, (1, 3, 16, 16)).astype(np.float32).tofile(cal / f"{k}.rgbchw")
    return {
        "model_parameters": {
            "onnx_model": str(tmp / "tiny.onnx"), "march": "bayes",  # int16 below: J5 only "working_dir": str(tmp / "wd"),
            "output_model_file_prefix": "tiny", "layer_out_dump": True, "log_level": "debug",
            "output_nodes": "tr", "remove_node_type": "Dequantize", "remove_node_name": "tr",
            "node_info": {"conv1": {"ON": "BPU", "OutputType": "int16"}}, "set_node_data_type": "conv2:int16",
            "debug_mode": "dump_calibration_data",
        },
        "input_parameters": {
            "input_name": "images", "input_type_train": "rgb", "input_type_rt": "bgr", "input_layout_train": "NCHW",
            "input_layout_rt": "NHWC", "input_shape": "1x3x16x16", "norm_type": "data_mean_and_scale",
            "mean_value": "1 2 3", "scale_value": "0.02",
        },
        "calibration_parameters": {
            "cal_data_dir": str(cal), "cal_data_type": "float32", "preprocess_on": True, "calibration_type": "kl",
            "max_percentile": 0.999, "per_channel": False, "run_on_cpu": "sig", "run_on_bpu": "relu",
            "enable_int16": True, "optimization": "set_model_output_int8", "auto_int16": False, "num_samples": 2,
            "batch_size": 2, "weight_clip": "mse", "bias_correction": True, "adaround": True, "ptf": True,
            "softmax_log2": True, "smooth_quant": True, "smooth_alpha": 0.3,
        },
        "compiler_parameters": {
            "compile_mode": "balance", "balance_factor": 10, "debug": True, "core_num": 2, "optimize_level": "O2",
            "input_source": {"images": "ddr"}, "jobs": 2, "advice": 1, "rounding": "half_even", "abort_on_fail": True,
        },
    }


class _Reads:
    """Records ``(class, attribute)`` reads made from hbtool code outside hbtool/config."""

    CLASSES = (T.ModelParams, T.CalibrationParams, T.CompilerParams, T.QatParams, T.DebugParams, T.GateParams, T.InputSpec,
               T.HbConfig)

    def __init__(self) -> None:
        self.seen: set[tuple[str, str]] = set()

    def __enter__(self):
        seen = self.seen

        def getattribute(obj, name):
            fn = sys._getframe(1).f_code.co_filename
            if fn.startswith(HBTOOL) and not fn.startswith(CONFIG_DIR):
                seen.add((type(obj).__name__, name))
                seen.update(METHOD_READS.get(name, ()))
            return object.__getattribute__(obj, name)

        for cls in self.CLASSES:
            cls.__getattribute__ = getattribute
        return self

    def __exit__(self, *exc):
        for cls in self.CLASSES:
            del cls.__getattribute__


def _field(group: str, key: str) -> list[tuple[str, str]]:
    """The (class, attribute) pairs that hold a key."""
    cls = {"model_parameters": "ModelParams", "calibration_parameters": "CalibrationParams",
           "compiler_parameters": "CompilerParams", "qat_parameters": "QatParams", "debug_parameters": "DebugParams",
           "gate_parameters": "GateParams"}
    out = []
    if key in INPUT_FIELDS:
        out.append(("InputSpec", INPUT_FIELDS[key]))
    if key in INPUT_GLOBAL_FIELDS and group == "input_parameters":
        out.append(("HbConfig", INPUT_GLOBAL_FIELDS[key]))
    if group in cls:
        out.append((cls[group], key))
    return out


@pytest.fixture(scope="module")
def reads(tmp_path_factory):
    from hbtool.makertbin import run_makertbin
    from hbtool.perf.run import perf_artifact
    from hbtool.simulator.simulate import simulate

    import yaml
    from click.testing import CliRunner

    from hbtool.cli import main
    import hbtool.makertbin as mk

    tmp = tmp_path_factory.mktemp("keys")
    data = _every_key_config(tmp)
    (tmp / "cfg.yaml").write_text(yaml.safe_dump(data))
    cfg = config_from_dict(data, base_dir=tmp)
    runs = []

    def keep(*a, **k):  # the CLI's makertbin, keeping its result for the checks below
        runs.append(run_makertbin(*a, **k))
        return runs[-1]

    with _Reads() as r:
        mk_run, mk.run_makertbin = mk.run_makertbin, keep
        try:
            res = CliRunner().invoke(main, ["makertbin", "-c", str(tmp / "cfg.yaml")])
        finally:
            mk.run_makertbin = mk_run
        assert res.exit_code == 0, res.output
        result = runs[0]
        art = result.compiled.path
        inp = result.compiled.header["inputs"][0]
        name = inp["name"]  # the run-time buffer (bgr NHWC here), as the chip receives it
        np.save(tmp / "x.npy", np.zeros((2, *inp["shape"][1:]), inp["dtype"]))
        simulate(art, {name: tmp / "x.npy"}, None, None)
        perf_artifact(art)
    return r.seen, cfg, result


def test_every_key_is_read_merged_or_refused(reads):
    seen, cfg, _ = reads
    unread = []
    for group, key in S.all_keys():
        if key.unsupported is not None or key.name in PENDING:
            continue
        if (group, key.name) in REFUSED or group in OWN_COMMAND_GROUPS:
            continue
        fields = MERGED.get(key.name) or _field(group, key.name)
        if not any(f in seen for f in fields):
            unread.append(f"{group}.{key.name}")
    assert not unread, f"accepted but read by no stage: {unread}"


def test_merged_keys_reach_node_info(reads):
    _, cfg, _ = reads
    info = cfg.model.node_info
    assert info["sig"]["ON"] == "CPU" and info["relu"]["ON"] == "BPU"
    assert info["conv2"]["InputType"] == "int16" and info["conv1"]["OutputType"] == "int16"


@pytest.mark.parametrize("where,value", sorted(REFUSED.items()), ids=[f"{g}.{k}" for (g, k) in sorted(REFUSED)])
def test_refused_keys_say_so(tmp_path, where, value):
    group, key = where
    data = {"model_parameters": {"onnx_model": str(tmp_path / "m.onnx")}, group: {key: value}}
    with pytest.raises(ConfigError) as info:
        config_from_dict(data, base_dir=tmp_path)
    assert info.value.problem.startswith(f"{group}.{key}: "), info.value.problem
    assert info.value.fix


def test_defaults_of_refused_keys_load(tmp_path):
    """A published config that writes a refused key at its default (input_batch: 1) still loads."""
    cfg = config_from_dict({"model_parameters": {"onnx_model": "m.onnx"},
                            "input_parameters": {"input_batch": 1, "separate_batch": False},
                            "compiler_parameters": {"max_time_per_fc": 0}}, base_dir=tmp_path)
    assert cfg.input_batch == 1


def test_every_key_run_produced_what_the_keys_ask(reads):
    """The non-default run did what its keys say (so 'read' above also means 'acted on')."""
    _, cfg, result = reads
    header = result.compiled.header
    wd = cfg.model.working_dir
    assert (wd / "tiny.bin").exists() and (wd / "tiny_layer_details.json").exists()
    assert (wd / "calibration_data" / "images" / "0.npy").exists() and (wd / "calibration_data" / "images" / "1.npy").exists()
    assert "INFO hbtool.compiler.compile: layer_out_dump" in (wd / "hb_compile.log").read_text()  # log_level debug keeps info
    assert [r["op_type"] for r in header["removed_nodes"]] == ["Dequantize", "Transpose"]
    assert any(o["name"].endswith("_layer_out") for o in header["outputs"])
    assert header["options"]["jobs"] == 2 and header["options"]["debug"] is True
    assert header["options"]["compile_mode"] == "balance" and header["options"]["rounding"] == "half_even"
    sig = next(n for n in result.calibration.graph.nodes if n.name == "sig")
    assert sig.meta["on"] == "CPU"


def test_every_qat_key_is_read_by_hbtool_qat(tmp_path):
    """qat_parameters, each set to a non-default value, are all read by `hbtool qat` (run_qat)."""
    from hbtool.qat.train import run_qat

    _tiny_model(tmp_path / "tiny.onnx")
    cal = tmp_path / "cal"
    cal.mkdir()
    rng = np.random.default_rng(1)
    for k in range(4):
        np.save(cal / f"{k}.npy", rng.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32))
    (tmp_path / "labels.txt").write_text("0\n1\n0\n1\n")
    qat = {"epochs": 2, "lr": 1e-5, "batch_size": 2, "optimizer": "sgd", "weight_decay": 0.1,
           "train_data_dir": str(cal), "labels": str(tmp_path / "labels.txt"), "loss": "kl", "temperature": 2.0,
           "lr_schedule": "cosine",
           "distill_tensors": "r1", "train_scales": True, "augment": "flip", "val_samples": 1, "checkpoint_every": 1,
           "seed": 3, "device": "cpu"}
    # steps (unset here: it overrides epochs) is read when deciding between them
    assert set(qat) | {"steps"} == set(S.GROUPS["qat_parameters"][0])   # a new qat key must be added here
    data = {"model_parameters": {"onnx_model": str(tmp_path / "tiny.onnx"), "working_dir": str(tmp_path / "wd")},
            "calibration_parameters": {"cal_data_dir": str(cal), "calibration_type": "max"},
            "qat_parameters": qat}
    cfg = config_from_dict(data, base_dir=tmp_path)
    with _Reads() as r:
        run_qat(cfg)
    unread = [k for k in [*qat, "steps"] if not any(f in r.seen for f in _field("qat_parameters", k))]
    assert unread == []


def test_every_debug_key_is_read_by_hbtool_debug(tmp_path):
    """debug_parameters, each set to a non-default value, are all read by `hbtool debug`."""
    import yaml
    from click.testing import CliRunner

    from hbtool.cli import main

    _tiny_model(tmp_path / "tiny.onnx")
    cal, other = tmp_path / "cal", tmp_path / "other"
    rng = np.random.default_rng(1)
    for folder in (cal, other):
        folder.mkdir()
        for k in range(3):
            np.save(folder / f"{k}.npy", rng.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32))
    debug = {"metric": "mse", "data_dir": str(other), "report_dir": str(tmp_path / "report"), "top_k": 3,
             "num_samples": 2}
    keys = {k for k, key in S.GROUPS["debug_parameters"][0].items() if key.unsupported is None}
    assert set(debug) == keys   # a new debug key must be added here
    data = {"model_parameters": {"onnx_model": str(tmp_path / "tiny.onnx"), "working_dir": str(tmp_path / "wd")},
            "calibration_parameters": {"cal_data_dir": str(cal), "calibration_type": "max"},
            "debug_parameters": debug}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(data))
    with _Reads() as r:
        res = CliRunner().invoke(main, ["debug", "-c", str(tmp_path / "cfg.yaml")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "report" / "debug.json").exists()
    unread = [k for k in debug if not any(f in r.seen for f in _field("debug_parameters", k))]
    assert unread == []


def test_every_gate_key_is_read_by_hbtool_gate(tmp_path):
    """gate_parameters, every key set, are all read by `hbtool gate` (and each gives its testcase)."""
    import json

    import yaml
    from click.testing import CliRunner

    from hbtool.cli import main

    _tiny_model(tmp_path / "tiny.onnx")
    cal, held = tmp_path / "cal", tmp_path / "held"
    rng = np.random.default_rng(1)
    for folder in (cal, held):
        folder.mkdir()
        for k in range(3):
            np.save(folder / f"{k}.npy", rng.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32))
    gates = {"data_dir": str(held), "min_output_cosine": 0.5, "min_metric": 0.5, "max_metric_drop": 0.5, "min_fps": 1.0,
             "max_latency_ms": 1000.0, "max_cpu_nodes": 10, "max_artifact_mb": 10.0, "bit_exact_samples": 2}
    assert set(gates) == set(S.GROUPS["gate_parameters"][0])   # a new gate key must be added here
    data = {"model_parameters": {"onnx_model": str(tmp_path / "tiny.onnx"), "working_dir": str(tmp_path / "wd")},
            "calibration_parameters": {"cal_data_dir": str(cal), "calibration_type": "max"},
            "gate_parameters": gates}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(data))
    assert CliRunner().invoke(main, ["makertbin", "-c", str(tmp_path / "cfg.yaml")]).exit_code == 0
    with _Reads() as r:
        res = CliRunner().invoke(main, ["gate", "-c", str(tmp_path / "cfg.yaml")])
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "wd" / "tiny_gates.json").read_text())
    assert [g["key"] for g in report["gates"]] == [k for k in gates if k != "data_dir"]
    unread = [k for k in gates if not any(f in r.seen for f in _field("gate_parameters", k))]
    assert unread == []
