"""hbtool.config: YAML schema, defaults, validation, typed values and generated docs."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from hbtool.config import (HbConfig, InputSpec, config_from_dict, load_config, parse_floats,
                           parse_shape)
from hbtool.config.docs import DOC_PATH, render_markdown
from hbtool.config.schema import GROUPS, all_keys
from hbtool.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]
BASE = Path("/work/cfgbase")


def cfg_of(d: dict, **kw) -> HbConfig:
    d = dict(d)
    d.setdefault("model_parameters", {"onnx_model": "m.onnx"})
    kw.setdefault("base_dir", BASE)
    return config_from_dict(d, **kw)


def error_of(d: dict, **kw) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        cfg_of(d, **kw)
    return info.value


def image_input(**extra) -> dict:
    d = {"input_name": "data", "input_type_train": "rgb", "input_layout_train": "NCHW",
         "input_shape": "1x3x224x224"}
    d.update(extra)
    return d


def write(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text), encoding="utf-8")
    return p


# ----------------------------------------------------------------------------------------------
# valid configs
# ----------------------------------------------------------------------------------------------

def test_example_full_yaml_loads():
    path = REPO / "configs" / "example_full.yaml"
    cfg = load_config(path)
    folder = path.parent.resolve()
    assert cfg.model.onnx_model == (REPO / "samples" / "models" / "resnet18.onnx").resolve()
    assert cfg.model.working_dir == folder / "model_output"
    assert cfg.model.node_info["/fc/Gemm"] == {"ON": None, "InputType": None, "OutputType": "int16"}
    (spec,) = cfg.inputs
    assert spec == InputSpec(name="input", shape=(1, 3, 224, 224), type_train="rgb",
                             type_rt="nv12", layout_train="NCHW", layout_rt=None,
                             norm_type="data_mean_and_scale", mean=(123.675, 116.28, 103.53),
                             scale=(0.01712, 0.01751, 0.01743),
                             cal_data_dir=folder / "calibration_data_rgb_f32",
                             cal_data_type="float32", space_and_range="regular", source="pyramid")
    assert cfg.calibration.optimization == ["set_model_output_int16"]
    assert cfg.calibration.max_percentile == 0.99995
    assert cfg.compiler.optimize_level == "O3" and cfg.compiler.jobs == 8
    assert cfg.debug.report_dir == folder / "model_output" / "debug"
    assert cfg.source == path.resolve()


def test_horizon_style_j5_yaml_loads_unchanged(tmp_path):
    p = write(tmp_path, """\
        model_parameters:
          onnx_model: './resnet50.onnx'
          march: "bayes"
          layer_out_dump: False
          working_dir: 'model_output'
          output_model_file_prefix: 'resnet50_224x224_nv12'
        input_parameters:
          input_name: ""
          input_type_rt: 'nv12'
          input_type_train: 'rgb'
          input_layout_train: 'NCHW'
          norm_type: 'data_mean_and_scale'
          mean_value: 123.675 116.28 103.53
          scale_value: 0.01712475 0.017507 0.01742919
        calibration_parameters:
          cal_data_dir: './calibration_data_rgb_f32'
          cal_data_type: 'float32'
          calibration_type: 'default'
          per_channel: 'False'
        compiler_parameters:
          compile_mode: 'latency'
          debug: False
          optimize_level: 'O3'
        """)
    cfg = load_config(p)
    assert cfg.model.onnx_model == tmp_path.resolve() / "resnet50.onnx"
    assert cfg.model.output_model_file_prefix == "resnet50_224x224_nv12"
    assert cfg.model.layer_out_dump is False
    assert cfg.calibration.per_channel is False
    (spec,) = cfg.inputs
    assert spec.name is None and spec.type_rt == "nv12" and spec.shape is None
    assert spec.mean == (123.675, 116.28, 103.53)


def test_defaults_are_filled():
    cfg = cfg_of({"model_parameters": {"onnx_model": "models/net.v2.onnx"}})
    assert cfg.model.march == "bayes"
    assert cfg.model.working_dir == BASE / "model_output"
    assert cfg.model.output_model_file_prefix == "net.v2"
    assert cfg.inputs == []
    assert cfg.calibration.calibration_type == "default"
    assert cfg.calibration.auto_int16 is True
    assert cfg.calibration.max_percentile == 1.0
    assert cfg.compiler.core_num == 1 and cfg.compiler.compile_mode == "latency"
    assert cfg.qat.epochs == 3 and cfg.debug.metric == "cosine"


@pytest.mark.parametrize("march", ["bayes", "bayes-e", "bernoulli2", "BAYES-E"])
def test_every_horizon_board_march_loads(march):
    """RDK X5 (bayes-e) and RDK X3 (bernoulli2) configs name their march; each has a description file."""
    from hbtool.march import load_march
    cfg = cfg_of({"model_parameters": {"onnx_model": "m.onnx", "march": march}})
    assert cfg.model.march == march.lower()
    assert load_march(cfg.model.march).name == march.lower()


def test_rt_type_and_layout_default_to_train_values():
    cfg = cfg_of({"input_parameters": image_input(input_layout_train="NHWC",
                                                  input_shape="1x224x224x3")})
    spec = cfg.inputs[0]
    assert spec.type_rt == "rgb" and spec.layout_rt == "NHWC" and spec.channel_axis == 3
    assert spec.cal_data_type == "uint8" and spec.source == "ddr"


def test_enum_values_are_case_insensitive_and_canonical():
    cfg = cfg_of({"input_parameters": image_input(input_type_train="RGB",
                                                  input_layout_train="nchw"),
                  "compiler_parameters": {"optimize_level": "o2"}})
    assert cfg.inputs[0].type_train == "rgb" and cfg.inputs[0].layout_train == "NCHW"
    assert cfg.compiler.optimize_level == "O2"


@pytest.mark.parametrize("word,expected", [(True, True), ("True", True), ("false", False),
                                           (False, False)])
def test_booleans_accept_yaml_and_horizon_spellings(word, expected):
    cfg = cfg_of({"calibration_parameters": {"per_channel": word}})
    assert cfg.calibration.per_channel is expected


def test_yaml_capitalised_booleans(tmp_path):
    p = write(tmp_path, """\
        model_parameters: {onnx_model: m.onnx, layer_out_dump: True}
        compiler_parameters: {debug: TRUE}
        """)
    cfg = load_config(p)
    assert cfg.model.layer_out_dump is True and cfg.compiler.debug is True


def test_parse_shape_forms_and_errors():
    assert parse_shape("1x3x224x224") == (1, 3, 224, 224)
    assert parse_shape("1,3,224,224") == (1, 3, 224, 224)
    assert parse_shape(" 1 x 128 ") == (1, 128)
    assert parse_shape([1, 3, 8, 8]) == (1, 3, 8, 8)
    for bad in ("3x", "ax3", "1x0x3", "1x-1", "", "1.5x2", True):
        with pytest.raises(ValueError, match="shape|positive"):
            parse_shape(bad)


def test_mean_value_forms():
    assert parse_floats("123.675 116.28 103.53") == (123.675, 116.28, 103.53)
    assert parse_floats("1,2, 3") == (1.0, 2.0, 3.0)
    assert parse_floats(128) == (128.0,)
    cfg = cfg_of({"input_parameters": image_input(norm_type="data_mean_and_scale",
                                                  mean_value=[123.675, 116.28, 103.53],
                                                  scale_value=0.0171)})
    assert cfg.inputs[0].mean == (123.675, 116.28, 103.53)
    assert cfg.inputs[0].scale == (0.0171,)


def test_multi_input_lists():
    cfg = cfg_of({
        "input_parameters": {
            "input_name": "image; tokens",
            "input_type_train": "rgb;featuremap",
            "input_layout_train": "NCHW;None",
            "input_shape": "1x3x32x32;1x128",
            "norm_type": "data_mean;no_preprocess",
            "mean_value": "128;None",
        },
        "calibration_parameters": {"cal_data_dir": "cal/img;cal/tok",
                                   "cal_data_type": "uint8;int64"},
    })
    image, tokens = cfg.inputs
    assert cfg.input_names == ["image", "tokens"]
    assert image.shape == (1, 3, 32, 32) and image.mean == (128.0,)
    assert tokens.shape == (1, 128) and tokens.layout_train is None and tokens.mean is None
    assert tokens.cal_data_dir == BASE / "cal" / "tok" and tokens.cal_data_type == "int64"
    assert cfg.calibration.cal_data_dir == [BASE / "cal" / "img", BASE / "cal" / "tok"]
    assert cfg.input_by_name("tokens") is tokens


def test_multi_input_yaml_lists_and_broadcast():
    cfg = cfg_of({"input_parameters": {
        "input_name": ["a", "b"],
        "input_type_train": "gray",            # one entry: applies to both
        "input_layout_train": "NHWC",
        "input_shape": ["1x8x8x1", [1, 16, 16, 1]],
    }})
    assert [s.type_train for s in cfg.inputs] == ["gray", "gray"]
    assert [s.shape for s in cfg.inputs] == [(1, 8, 8, 1), (1, 16, 16, 1)]
    assert [s.source for s in cfg.inputs] == ["pyramid", "pyramid"]


def test_featuremap_token_input_any_rank_no_layout():
    cfg = cfg_of({"input_parameters": {"input_name": "input_ids", "input_shape": "1x128"},
                  "calibration_parameters": {"cal_data_dir": "tokens"}})
    spec = cfg.inputs[0]
    assert spec.type_train == spec.type_rt == "featuremap"
    assert spec.layout_train is None and spec.layout_rt is None
    assert spec.cal_data_type == "float32"  # featuremap default; set int64 for raw token dumps
    assert cfg_of({"input_parameters": {"input_shape": "7"}}).inputs[0].shape == (7,)


def test_cal_data_type_from_f32_suffix():
    cfg = cfg_of({"input_parameters": image_input(),
                  "calibration_parameters": {"cal_data_dir": "calibration_data_rgb_f32"}})
    assert cfg.inputs[0].cal_data_type == "float32"
    cfg = cfg_of({"input_parameters": image_input(),
                  "calibration_parameters": {"cal_data_dir": "calibration_data_rgb"}})
    assert cfg.inputs[0].cal_data_type == "uint8"


def test_node_info_forms_and_merging():
    cfg = cfg_of({
        "model_parameters": {
            "onnx_model": "m.onnx",
            "node_info": {"conv1": {"ON": "bpu", "InputType": "int16", "InputType1": "int8"},
                          "sm": "int16"},
            "set_node_data_type": "ln:int16",
        },
        "calibration_parameters": {"run_on_cpu": "post1; post2", "run_on_bpu": ["tail"]},
    })
    ni = cfg.model.node_info
    assert ni["conv1"] == {"ON": "BPU", "InputType": "int16", "OutputType": None,
                           "InputType1": "int8"}
    assert ni["sm"]["InputType"] == ni["sm"]["OutputType"] == "int16"
    assert ni["ln"]["OutputType"] == "int16"
    assert ni["post1"]["ON"] == ni["post2"]["ON"] == "CPU" and ni["tail"]["ON"] == "BPU"
    assert cfg.calibration.run_on_cpu == ["post1", "post2"]
    short = cfg_of({"model_parameters": {"onnx_model": "m.onnx",
                                         "node_info": "a:int16;b:CPU"}}).model.node_info
    assert short["a"]["OutputType"] == "int16" and short["b"]["ON"] == "CPU"


def test_node_info_unquoted_on_key_in_yaml(tmp_path):
    # YAML 1.1 reads a bare ON as the boolean true; it must still mean the ON key.
    p = write(tmp_path, """\
        model_parameters:
          onnx_model: m.onnx
          node_info:
            Softmax_3: {ON: CPU}
            "0": {'ON': 'BPU', 'OutputType': 'int16'}
        input_parameters:
          input_name: 0
        """)
    cfg = load_config(p)
    assert cfg.model.node_info["Softmax_3"]["ON"] == "CPU"
    assert cfg.model.node_info["0"] == {"ON": "BPU", "InputType": None, "OutputType": "int16"}
    assert cfg.input_names == ["0"]  # an input named 0 is a name, not a number


def test_optimization_list_or_comma_string():
    cfg = cfg_of({"calibration_parameters": {"optimization": "set_model_output_int16,"}})
    assert cfg.calibration.optimization == ["set_model_output_int16"]
    cfg = cfg_of({"calibration_parameters": {"optimization": ["set_model_output_int8"]}})
    assert cfg.calibration.optimization == ["set_model_output_int8"]


def test_percentile_calibration_gets_its_own_default():
    cfg = cfg_of({"calibration_parameters": {"calibration_type": "percentile"}})
    assert cfg.calibration.max_percentile == 0.99995
    cfg = cfg_of({"calibration_parameters": {"calibration_type": "percentile",
                                             "max_percentile": 0.999}})
    assert cfg.calibration.max_percentile == 0.999


def test_input_source_resolution():
    cfg = cfg_of({"input_parameters": {"input_name": "img;feat", "input_type_train": "rgb;featuremap",
                                       "input_type_rt": "nv12;featuremap",
                                       "input_layout_train": "NHWC;None"},
                  "compiler_parameters": {"input_source": {"img": "resizer"}}})
    assert [s.source for s in cfg.inputs] == ["resizer", "ddr"]
    assert cfg.compiler.input_source == {"img": "resizer", "feat": "ddr"}


def test_require_model_false_and_overrides(tmp_path):
    cfg = cfg_of({"model_parameters": {}}, require_model=False)
    assert cfg.model.onnx_model is None and cfg.model.output_model_file_prefix == "model"
    p = write(tmp_path, "compiler_parameters: {core_num: 2}\n")
    cfg = load_config(p, overrides={"model_parameters": {"onnx_model": tmp_path / "x" / "yolo.onnx"}})
    assert cfg.model.onnx_model == tmp_path / "x" / "yolo.onnx"
    assert cfg.model.output_model_file_prefix == "yolo" and cfg.compiler.core_num == 2


def test_raw_is_plain_data_with_defaults_and_round_trips():
    cfg = cfg_of({"input_parameters": {"input_name": "a;b", "input_type_train": "rgb;featuremap",
                                       "input_type_rt": "nv12;featuremap",
                                       "input_layout_train": "NCHW;None",
                                       "input_shape": "1x3x64x64;1x10",
                                       "norm_type": "data_mean_and_scale;no_preprocess",
                                       "mean_value": "1 2 3;None", "scale_value": "0.5;None"},
                  "calibration_parameters": {"run_on_cpu": "n1", "cal_data_dir": "x;y"}})
    raw = cfg.raw
    json.dumps(raw)  # plain data only
    assert set(raw) == set(GROUPS)
    for group, (table, _) in GROUPS.items():
        assert set(raw[group]) == {k for k, key in table.items() if key.unsupported is None}
    assert raw["input_parameters"]["input_shape"] == ["1x3x64x64", "1x10"]
    assert raw["compiler_parameters"]["optimize_level"] == "O3"
    again = config_from_dict(raw)
    for field in ("model", "inputs", "calibration", "compiler", "qat", "debug", "input_batch"):
        assert getattr(again, field) == getattr(cfg, field), field


def test_require_calibration_data(tmp_path):
    cfg = cfg_of({"input_parameters": image_input()}, base_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"^calibration_parameters\.cal_data_dir: "):
        cfg.require_calibration_data()
    (tmp_path / "cal").mkdir()
    cfg = cfg_of({"input_parameters": image_input(),
                  "calibration_parameters": {"cal_data_dir": "cal"}}, base_dir=tmp_path)
    assert cfg.require_calibration_data() == [tmp_path.resolve() / "cal"]
    with pytest.raises(ConfigError, match=r"^model_parameters\.onnx_model: file not found"):
        cfg.require_model()


# ----------------------------------------------------------------------------------------------
# errors: every message starts with the key path
# ----------------------------------------------------------------------------------------------

ERROR_CASES = [
    # (id, config without model_parameters unless given, key path, text in the message)
    ("image-shape-rank", {"input_parameters": image_input(input_shape="3x224")},
     "input_parameters.input_shape", "'3x224'"),
    ("shape-syntax", {"input_parameters": {"input_shape": "1x3xabc"}},
     "input_parameters.input_shape", "like 1x3x224x224"),
    ("shape-nonpositive", {"input_parameters": {"input_shape": "1x0x4"}},
     "input_parameters.input_shape", "positive"),
    ("lengths-differ", {"input_parameters": {"input_name": "a;b;c", "input_shape": "1x2;1x3"}},
     "input_parameters.input_shape", "has 2 entries but input_parameters.input_name has 3"),
    ("cal-dir-count", {"input_parameters": {"input_name": "a;b"},
                       "calibration_parameters": {"cal_data_dir": "one"}},
     "calibration_parameters.cal_data_dir", "has 1 entry but input_parameters.input_name has 2"),
    ("mean-no-broadcast", {"input_parameters": {"input_name": "a;b", "input_type_train": "rgb",
                                                "input_layout_train": "NCHW",
                                                "norm_type": "data_mean", "mean_value": "128"}},
     "input_parameters.mean_value", "has 1 entry but input_parameters.input_name has 2"),
    ("names-needed", {"input_parameters": {"input_shape": "1x2;1x3"}},
     "input_parameters.input_name", "input_parameters.input_shape has 2 entries"),
    ("duplicate-names", {"input_parameters": {"input_name": "a;a"}},
     "input_parameters.input_name", "listed twice"),
    ("mean-channels", {"input_parameters": image_input(input_layout_train="NHWC",
                                                       input_shape="1x8x8x3",
                                                       norm_type="data_mean",
                                                       mean_value="1 2 3 4")},
     "input_parameters.mean_value", "4 values given but the input has 3 channels"),
    ("mean-featuremap-no-layout", {"input_parameters": {"norm_type": "data_mean",
                                                        "mean_value": "1 2"}},
     "input_parameters.mean_value", "channel count is unknown"),
    ("mean-missing", {"input_parameters": image_input(norm_type="data_mean_and_scale",
                                                      scale_value="0.5")},
     "input_parameters.mean_value", "needs mean_value"),
    ("scale-missing", {"input_parameters": image_input(norm_type="data_scale")},
     "input_parameters.scale_value", "needs scale_value"),
    ("mean-unused", {"input_parameters": image_input(mean_value="128")},
     "input_parameters.mean_value", "does not use mean_value"),
    ("scale-unused", {"input_parameters": image_input(norm_type="data_mean", mean_value="1",
                                                      scale_value="2")},
     "input_parameters.scale_value", "does not use scale_value"),
    ("scale-zero", {"input_parameters": image_input(norm_type="data_scale", scale_value="0")},
     "input_parameters.scale_value", "scale of 0"),
    ("mean-not-numbers", {"input_parameters": image_input(norm_type="data_mean",
                                                          mean_value="12 abc")},
     "input_parameters.mean_value", "numbers"),
    ("image-needs-layout", {"input_parameters": {"input_type_train": "bgr"}},
     "input_parameters.input_layout_train", "needs input_layout_train"),
    ("train-rt-pair", {"input_parameters": image_input(input_type_rt="gray")},
     "input_parameters.input_type_rt", "cannot be fed as gray"),
    ("image-channels", {"input_parameters": image_input(input_shape="1x4x224x224")},
     "input_parameters.input_shape", "rgb has 3 channels"),
    ("nv12-even", {"input_parameters": image_input(input_type_rt="nv12",
                                                   input_shape="1x3x225x224")},
     "input_parameters.input_shape", "even height and width"),
    ("bt601-not-nv12", {"input_parameters": image_input(input_space_and_range="bt601_video")},
     "input_parameters.input_space_and_range", "only to nv12"),
    ("bad-type", {"input_parameters": {"input_type_train": "rbg"}},
     "input_parameters.input_type_train", "did you mean 'rgb'"),
    ("batch-multi-input", {"input_parameters": {"input_name": "a;b", "input_batch": 4}},
     "input_parameters.input_batch", "cannot re-batch"),
    ("batch-first-dim", {"input_parameters": {"input_shape": "2x3", "input_batch": 4}},
     "input_parameters.input_batch", "cannot re-batch"),
    ("batch-range", {"input_parameters": {"input_batch": 500}},
     "input_parameters.input_batch", "from 1 to 128"),
    ("optimize-level", {"compiler_parameters": {"optimize_level": "O4"}},
     "compiler_parameters.optimize_level", "O0, O1, O2, O3"),
    ("core-num", {"compiler_parameters": {"core_num": 3}},
     "compiler_parameters.core_num", "1 or 2"),
    ("quoted-int", {"compiler_parameters": {"core_num": "2"}},
     "compiler_parameters.core_num", "expected an integer, got '2' (a string)"),
    ("string-for-float", {"calibration_parameters": {"max_percentile": "0.9999"}},
     "calibration_parameters.max_percentile", "expected a number"),
    ("percentile-range", {"calibration_parameters": {"max_percentile": 1.5}},
     "calibration_parameters.max_percentile", "at most 1"),
    ("bool-word", {"calibration_parameters": {"per_channel": "yes"}},
     "calibration_parameters.per_channel", "expected true or false"),
    ("number-for-bool", {"compiler_parameters": {"debug": 1}},
     "compiler_parameters.debug", "expected true or false"),
    ("calibration-type", {"calibration_parameters": {"calibration_type": "minmax"}},
     "calibration_parameters.calibration_type", "not one of"),
    ("optimization-both", {"calibration_parameters": {
        "optimization": "set_model_output_int8,set_model_output_int16"}},
     "calibration_parameters.optimization", "contradict"),
    ("optimization-unknown", {"calibration_parameters": {"optimization": "set_fast_mode"}},
     "calibration_parameters.optimization", "not an optimization value"),
    ("optimization-j6", {"calibration_parameters": {"optimization": "run_fast"}},
     "calibration_parameters.optimization", "J6"),
    ("cpu-and-bpu", {"calibration_parameters": {"run_on_cpu": "x", "run_on_bpu": "x"}},
     "calibration_parameters.run_on_bpu", "also in run_on_cpu"),
    ("node-info-subkey", {"model_parameters": {"onnx_model": "m.onnx",
                                               "node_info": {"conv1": {"Input_Type": "int16"}}}},
     "model_parameters.node_info.conv1.Input_Type", "did you mean 'InputType'"),
    ("node-info-value", {"model_parameters": {"onnx_model": "m.onnx",
                                              "node_info": {"conv1": {"ON": "DSP"}}}},
     "model_parameters.node_info.conv1.ON", "not one of BPU, CPU"),
    ("node-info-dtype", {"model_parameters": {"onnx_model": "m.onnx",
                                              "node_info": {"c": {"OutputType": "float"}}}},
     "model_parameters.node_info.c.OutputType", "int8, int16"),
    ("node-info-contradiction", {"model_parameters": {"onnx_model": "m.onnx",
                                                      "node_info": {"c": {"ON": "BPU"}}},
                                 "calibration_parameters": {"run_on_cpu": "c"}},
     "model_parameters.node_info.c.ON", "contradicts calibration_parameters.run_on_cpu"),
    ("node-info-short", {"model_parameters": {"onnx_model": "m.onnx", "node_info": "conv1"}},
     "model_parameters.node_info", "node:int16"),
    ("input-source-name", {"input_parameters": {"input_name": "data"},
                           "compiler_parameters": {"input_source": {"dta": "ddr"}}},
     "compiler_parameters.input_source.dta", "did you mean 'data'"),
    ("input-source-pyramid", {"input_parameters": {"input_name": "data"},
                              "compiler_parameters": {"input_source": {"data": "pyramid"}}},
     "compiler_parameters.input_source.data", "input_type_rt"),
    ("max-time-per-fc", {"compiler_parameters": {"max_time_per_fc": 500}},
     "compiler_parameters.max_time_per_fc", "preemptible"),
    ("missing-model", {"model_parameters": {"march": "bayes"}},
     "model_parameters.onnx_model", "required"),
    ("caffe", {"model_parameters": {"caffe_model": "a.caffemodel", "prototxt": "a.prototxt"}},
     "model_parameters.caffe_model", "Caffe models are not supported"),
    ("march-j6", {"model_parameters": {"onnx_model": "m.onnx", "march": "nash-e"}},
     "model_parameters.march", "bayes, bayes-e, bernoulli2"),
    ("march-unknown", {"model_parameters": {"onnx_model": "m.onnx", "march": "ampere"}},
     "model_parameters.march", "not one of bayes"),
    ("prefix-path", {"model_parameters": {"onnx_model": "m.onnx",
                                          "output_model_file_prefix": "out/net"}},
     "model_parameters.output_model_file_prefix", "is a path"),
    ("unknown-key-typo", {"calibration_parameters": {"calibration_typ": "kl"}},
     "calibration_parameters.calibration_typ", "did you mean 'calibration_type'"),
    ("key-in-wrong-group", {"input_parameters": {"cal_data_dir": "x"}},
     "input_parameters.cal_data_dir", "belongs to calibration_parameters"),
    ("unknown-key", {"compiler_parameters": {"xyzzy": 1}},
     "compiler_parameters.xyzzy", "unknown key"),
    ("unknown-group", {"calibration_parameter": {}},
     "calibration_parameter", "did you mean 'calibration_parameters'"),
    ("key-as-group", {"march": "bayes"}, "march", "key of model_parameters"),
    ("custom-op-group", {"custom_op": {"custom_op_method": "register"}},
     "custom_op", "not supported"),
    ("group-not-mapping", {"qat_parameters": ["epochs", 3]},
     "qat_parameters", "expected a mapping"),
    ("qat-lr", {"qat_parameters": {"lr": 0}}, "qat_parameters.lr", "more than 0"),
    ("debug-metric", {"debug_parameters": {"metric": "cosin"}},
     "debug_parameters.metric", "did you mean 'cosine'"),
]


@pytest.mark.parametrize("config,path,text", [c[1:] for c in ERROR_CASES],
                         ids=[c[0] for c in ERROR_CASES])
def test_errors_start_with_key_path(config, path, text):
    err = error_of(config)
    assert err.problem.startswith(path + ": "), err.problem
    assert text in str(err), str(err)
    assert err.fix, "every config error carries a fix"
    assert str(err) == f"{err.problem}; fix: {err.fix}"
    assert err.exit_code == 2


def test_list_length_error_names_both_keys_and_counts():
    err = error_of({"input_parameters": {"input_name": "a;b", "input_type_train": "rgb;rgb;gray",
                                         "input_layout_train": "NCHW"}})
    assert err.problem == ("input_parameters.input_type_train: has 3 entries but "
                           "input_parameters.input_name has 2")
    assert "single entry for all inputs" in err.fix


def test_top_level_must_be_a_mapping():
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        config_from_dict(["model_parameters"])


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found") as info:
        load_config(tmp_path / "nope.yaml")
    assert str(tmp_path / "nope.yaml") in info.value.problem


def test_malformed_yaml_reports_line(tmp_path):
    p = write(tmp_path, """\
        model_parameters:
          onnx_model: m.onnx
        input_parameters:
          input_name: [data
          input_shape: 1x3x224x224
        """)
    with pytest.raises(ConfigError, match=r"invalid YAML at line \d+") as info:
        load_config(p)
    assert info.value.problem.startswith(str(p))


def test_duplicate_key_in_yaml_is_an_error(tmp_path):
    p = write(tmp_path, """\
        model_parameters:
          onnx_model: a.onnx
          onnx_model: b.onnx
        """)
    with pytest.raises(ConfigError, match=r"line 3.*'onnx_model' appears twice"):
        load_config(p)


def test_empty_file_needs_a_model(tmp_path):
    p = write(tmp_path, "# nothing\n")
    with pytest.raises(ConfigError, match=r"^model_parameters\.onnx_model: "):
        load_config(p)
    assert load_config(p, require_model=False).inputs == []


# ----------------------------------------------------------------------------------------------
# docs
# ----------------------------------------------------------------------------------------------

def test_docs_table_lists_every_key():
    md = render_markdown()
    for group, key in all_keys():
        section = md.split(f"## {group}\n", 1)[1].split("\n## ", 1)[0]
        assert f"| `{key.name}` |" in section, (group, key.name)
    assert "## Several inputs" in md and "## Differences from Horizon" in md


def test_docs_file_is_up_to_date():
    assert DOC_PATH.read_text(encoding="utf-8") == render_markdown(), \
        "docs/config.md is stale: run python -m hbtool.config.docs"
