"""The three march description files: every parameter says where it comes from; per-march op support and int16.

Horizon's three BPU generations (``bayes`` J5 / RDK Ultra, ``bayes-e`` RDK X5, ``bernoulli2`` RDK X3)
differ in what they run on the BPU and in int16; these tests go through the real placement and
calibration calls on small models built here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from onnx import helper

from hbtool.errors import InputError
from hbtool.march.description import SUPPORTED_MARCHES, load_march
from hbtool.costmodel.hardware import hardware_for, parameter_table
from tests.helpers import make_model, small_conv_model, tensor, vinfo

MARCH_DIR = Path(__file__).resolve().parents[3] / "hbtool" / "march"
KINDS = {"published", "derived", "assumed"}
# blocks of plain numbers, each of which names its source in a sibling ``<block>_source`` line
SOURCED_BLOCKS = {"limits", "alignment"}


def _unsourced(node, path: str, parent: dict) -> list[str]:
    """Paths of numbers that carry no kind/source (a record) and sit in no sourced block."""
    bad: list[str] = []
    if isinstance(node, dict):
        if "value" in node:
            if node.get("kind") not in KINDS or not str(node.get("source") or "").strip():
                bad.append(path)
            return bad
        for key, sub in node.items():
            if key in SOURCED_BLOCKS:
                if not str(node.get(f"{key}_source") or "").strip():
                    bad.append(f"{path}.{key} (no {key}_source)")
                continue
            bad += _unsourced(sub, f"{path}.{key}" if path else key, node)
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        bad.append(path)
    return bad


@pytest.mark.parametrize("march", SUPPORTED_MARCHES)
def test_every_parameter_of_every_march_says_where_it_comes_from(march):
    raw = yaml.safe_load((MARCH_DIR / f"{march}.yaml").read_text())
    assert _unsourced(raw, "", {}) == []
    rows = parameter_table(march)
    assert rows and all(r["kind"] in KINDS and r["source"].strip() for r in rows), \
        [r["parameter"] for r in rows if r["kind"] not in KINDS or not r["source"].strip()]
    hw = hardware_for(march)
    assert hw.array_w * hw.array_c_out * hw.array_reduce == hw.macs_per_cycle


def test_the_check_catches_a_parameter_without_its_source():
    raw = yaml.safe_load((MARCH_DIR / "bayes-e.yaml").read_text())
    raw["memory"]["sram_bytes_per_cycle"].pop("source")
    raw["overheads"]["stray"] = 3
    del raw["limits_source"]
    assert set(_unsourced(raw, "", {})) == {"memory.sram_bytes_per_cycle", "overheads.stray", ".limits (no limits_source)"}


def test_the_generations_are_physically_ordered():
    """One parameter set per march, each plausible: J5 > X5 > X3 in MACs per clock, DDR an LPDDR4-class bus."""
    j5, x5, x3 = (hardware_for(m) for m in ("bayes", "bayes-e", "bernoulli2"))
    assert j5.macs_per_cycle > x5.macs_per_cycle > x3.macs_per_cycle
    for hw in (j5, x5, x3):
        assert 5e9 <= hw.ddr_bytes_per_s <= 70e9 and 0.5e9 <= hw.clock_hz <= 2e9
        assert hw.macs_per_cycle * 2 * hw.clock_hz * hw.cores <= hw.peak_int8_tops * 1e12 * 1.03  # never above the claim (J5: 131 of 128, rounding)
    assert (x5.cores, x3.cores, j5.cores) == (1, 2, 2)


def test_an_unknown_march_names_the_ones_that_exist():
    with pytest.raises(InputError) as err:
        load_march("bayes-x")
    text = str(err.value.problem) + str(err.value.fix)
    assert "bayes-x" in text and all(m in text for m in SUPPORTED_MARCHES)


# ----------------------------------------------------------------------------- op support per march


def _place(model, march: str):
    from hbtool.checker.placement import place_graph
    from hbtool.ir.onnx_import import import_onnx
    from hbtool.ir.passes import optimize_float

    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "m.onnx"
        p.write_bytes(model.SerializeToString())
        g = import_onnx(p, {})
    optimize_float(g)
    place_graph(g, load_march(march))
    return {n.op_type: n.meta for n in g.nodes}


def _transpose_softmax_model():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Transpose", ["c"], ["t"], name="tr", perm=[0, 2, 3, 1]),
             helper.make_node("Softmax", ["t"], ["y"], name="sm", axis=-1)]
    return make_model(nodes, [vinfo("x", [1, 3, 8, 8])], [vinfo("y", [1, 8, 8, 8])], [tensor("w", w)])


def test_x3_runs_transpose_and_softmax_on_the_cpu_with_the_rule_as_reason():
    from hbtool.march.op_rules import bernoulli2_moves_data_on_the_cpu, bernoulli2_runs_softmax_and_norms_on_the_cpu

    for march in ("bayes", "bayes-e"):
        placed = _place(_transpose_softmax_model(), march)
        assert placed["Transpose"]["on"] == placed["Softmax"]["on"] == placed["Conv"]["on"] == "BPU", march
    placed = _place(_transpose_softmax_model(), "bernoulli2")
    assert placed["Conv"]["on"] == "BPU"
    assert placed["Transpose"]["on"] == placed["Softmax"]["on"] == "CPU"
    first = " ".join(bernoulli2_moves_data_on_the_cpu.__doc__.split())
    assert placed["Transpose"]["reason"].startswith(first)
    assert placed["Softmax"]["reason"].startswith(" ".join(bernoulli2_runs_softmax_and_norms_on_the_cpu.__doc__.split()))


@pytest.mark.parametrize("hw_size,on_x3", [(8, "BPU"), (64, "CPU")])
def test_x3_lut_activations_fit_8192_aligned_elements(hw_size, on_x3):
    """1x16x8x8 aligns to 1024 elements (BPU); 1x16x64x64 to 65536 (CPU); J5 runs both."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 3, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), helper.make_node("Sigmoid", ["c"], ["y"], name="sig")]
    m = make_model(nodes, [vinfo("x", [1, 3, hw_size, hw_size])], [vinfo("y", [1, 16, hw_size, hw_size])], [tensor("w", w)])
    assert _place(m, "bernoulli2")["Sigmoid"]["on"] == on_x3
    assert _place(m, "bayes")["Sigmoid"]["on"] == "BPU"


def test_x3_conv_kernel_limit_is_7():
    w = np.random.default_rng(0).standard_normal((8, 3, 9, 9)).astype(np.float32)
    m = make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[4, 4, 4, 4])],
                   [vinfo("x", [1, 3, 16, 16])], [vinfo("y", [1, 8, 16, 16])], [tensor("w", w)])
    x3 = _place(m, "bernoulli2")["Conv"]
    assert x3["on"] == "CPU" and "1..7" in x3["reason"] and "9x9" in x3["reason"]
    assert _place(m, "bayes")["Conv"]["on"] == "BPU"


# ----------------------------------------------------------------------------- int16 per march


def _calibrate(tmp_path, march: str, **cal):
    from hbtool.config import config_from_dict
    from hbtool.quant.calibrate import run_calibration

    p = tmp_path / "m.onnx"
    extra = [helper.make_node("Sigmoid", ["r"], ["y"], name="sig")]
    p.write_bytes(small_conv_model(extra_nodes=extra).SerializeToString())
    node_info = cal.pop("node_info", None)
    data = {"model_parameters": {"onnx_model": str(p), "march": march, "working_dir": str(tmp_path / "w")},
            "input_parameters": {"input_name": "x", "input_shape": "1x3x16x16", "input_type_train": "featuremap",
                                 "input_type_rt": "featuremap", "norm_type": "no_preprocess"},
            "calibration_parameters": {"calibration_type": "skip", "num_samples": 2, **cal}}
    if node_info:
        data["model_parameters"]["node_info"] = node_info
    return run_calibration(config_from_dict(data, base_dir=tmp_path))


def test_x5_honours_int16_requests_as_its_published_configs_make_them(tmp_path):
    """The RDK X5 zoo's bayes-e configs ask for int16 Softmax / convs; auto_int16 stays off there."""
    asked = _calibrate(tmp_path, "bayes-e", node_info={"sig": {"InputType": "int16"}})
    default = _calibrate(tmp_path, "bayes-e")
    assert any(q.bits == 16 for q in asked.plan.tensors.values())
    assert default.plan.tensors and all(q.bits == 8 for q in default.plan.tensors.values())


@pytest.mark.parametrize("march", ["bernoulli2"])
def test_int8_only_marches_refuse_an_int16_request_naming_it(tmp_path, march):
    with pytest.raises(InputError) as err:
        _calibrate(tmp_path, march, node_info={"sig": {"InputType": "int16"}})
    assert "node_info['sig'] InputType: int16" in err.value.problem and march in err.value.problem
    assert "bayes" in err.value.fix
    with pytest.raises(InputError, match="enable_int16"):
        _calibrate(tmp_path, march, enable_int16=True)


def test_auto_int16_is_off_on_int8_only_marches_and_on_for_j5(tmp_path):
    j5 = _calibrate(tmp_path, "bayes")
    x3 = _calibrate(tmp_path, "bernoulli2")
    assert any(q.bits == 16 for q in j5.plan.tensors.values())     # the LUT's input, by the op-type rule
    assert x3.plan.tensors and all(q.bits == 8 for q in x3.plan.tensors.values())


def test_x3_matmul_of_two_feature_maps_only_as_1xbxmxk_by_1x1xkxn():
    from hbtool.march.op_rules import bernoulli2_matmul_of_feature_maps_is_1xbxmxk

    def place(a, b):
        m = make_model([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")],
                       [vinfo("a", a), vinfo("b", b)], [vinfo("y", a[:-1] + b[-1:])])
        return _place(m, "bernoulli2")["MatMul"], _place(m, "bayes")["MatMul"]

    x3, j5 = place([1, 2, 4, 8], [1, 2, 8, 4])      # attention-style batched product
    assert x3["on"] == "CPU" and j5["on"] == "BPU"
    assert x3["reason"].startswith(" ".join(bernoulli2_matmul_of_feature_maps_is_1xbxmxk.__doc__.split()))
    assert "1x2x4x8 x 1x2x8x4" in x3["reason"]
    x3, _ = place([1, 2, 4, 8], [1, 1, 8, 4])
    assert x3["on"] == "BPU"


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_x3_has_no_elementwise_max_min(op):
    from hbtool.march.op_rules import bernoulli2_has_no_min_max_unit

    m = make_model([helper.make_node(op, ["a", "b"], ["y"], name="mm")], [vinfo("a", [1, 4, 2, 2]), vinfo("b", [1, 4, 2, 2])],
                   [vinfo("y", [1, 4, 2, 2])])
    x3, j5 = _place(m, "bernoulli2")[op], _place(m, "bayes")[op]
    assert x3["on"] == "CPU" and j5["on"] == "BPU"
    assert x3["reason"].startswith(" ".join(bernoulli2_has_no_min_max_unit.__doc__.split()))


def test_x3_sin_cos_up_to_8192_elements():
    from hbtool.march.op_rules import bernoulli2_lut_chw_within_8192

    def place(shape):
        m = make_model([helper.make_node("Sin", ["a"], ["y"], name="sin")], [vinfo("a", shape)], [vinfo("y", shape)])
        return _place(m, "bernoulli2")["Sin"]

    assert place([1, 8, 32, 32])["on"] == "BPU"                     # 8192
    big = place([1, 9, 32, 32])
    assert big["on"] == "CPU" and "C x H x W = 9216" in big["reason"]
    assert big["reason"].startswith(" ".join(bernoulli2_lut_chw_within_8192.__doc__.split()))


def test_every_march_rule_has_a_violating_case_here():
    from hbtool.march import op_rules

    tested = {"bernoulli2_moves_data_on_the_cpu", "bernoulli2_runs_softmax_and_norms_on_the_cpu",
              "bernoulli2_lut_size_within_8192", "bernoulli2_matmul_of_feature_maps_is_1xbxmxk",
              "bernoulli2_has_no_min_max_unit", "bernoulli2_lut_chw_within_8192"}
    rules = {r.__name__ for m in op_rules.MARCH_RULES.values() for rs in m.values() for r in rs}
    assert rules == tested
