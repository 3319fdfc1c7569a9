"""The declarative key table: every YAML key hbtool knows, per group.

This table is the one source of truth. The loader validates and fills defaults from it, and
``hbtool.config.docs`` renders it into docs/config.md. To add a key, add a ``Key`` here, give
the typed object in ``types.py`` a field of the same name, and regenerate the docs.

Kinds (how a value is read):

==============  =================================================================
``bool``        true/false (also Horizon's ``True``/``False`` and the quoted words)
``int``         an integer (a quoted number is an error)
``float``       a number
``str``         a string
``enum``        one of ``allowed`` (matched case-insensitively, stored canonically)
``metric``      an ``enum`` of ``allowed``, or ``module:function`` (a user hook, imported when used)
``path``        a file or folder, resolved relative to the YAML file's folder
``names``       node names: a ``;``-separated string or a YAML list
``enum_list``   values from ``allowed``: a ``;``/``,``-separated string or a YAML list
``optimization`` Horizon's optimization switches (see ``optimization.py``)
``node_info``   per-node placement/precision: a mapping or ``'node:int16;...'``
``input_source`` per-input data source for the compiled model: a mapping
``shape``       (per-input only) ``1x3x224x224`` or ``1,3,224,224`` or a YAML list
``floats``      (per-input only) numbers separated by spaces, one number, or a YAML list
==============  =================================================================

A ``per_input`` key holds one entry per model input, separated by ``;`` (or a YAML list).
``broadcast`` keys also accept a single entry that then applies to every input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

HORIZON = "horizon"
HBTOOL = "hbtool"


@dataclass(frozen=True)
class Key:
    """One YAML key: how to read it, its default, and the sentence the docs print."""

    name: str
    kind: str
    doc: str
    default: Any = None
    allowed: tuple[str, ...] | None = None
    min: float | None = None
    max: float | None = None
    min_exclusive: bool = False
    per_input: bool = False
    broadcast: bool = False
    origin: str = HORIZON
    # When set, the key's default is computed; this text is what the docs show.
    default_doc: str | None = None
    # When set, the key is recognised but refused with this problem and fix.
    unsupported: tuple[str, str] | None = None
    # Extra note for the "allowed" column when ``allowed`` alone does not say it.
    allowed_doc: str | None = None

    @property
    def type_label(self) -> str:
        base = {
            "bool": "bool",
            "int": "int",
            "float": "float",
            "str": "string",
            "enum": "string",
            "metric": "string",
            "path": "path",
            "names": "list of names",
            "enum_list": "list of strings",
            "optimization": "list of strings",
            "node_info": "mapping",
            "input_source": "mapping",
            "shape": "shape",
            "floats": "numbers",
        }[self.kind]
        if self.per_input:
            return f"{base}, per input"
        return base


# ----------------------------------------------------------------------------------------------
# value sets shared by the loader
# ----------------------------------------------------------------------------------------------

SUPPORTED_MARCH = ("bayes", "bayes-e", "bernoulli2")
# Horizon march names we recognise, to say what chip they are when refusing them.
OTHER_MARCH = {
    "bernoulli": "Journey 2 / X2",
    "nash-e": "Journey 6E",
    "nash-m": "Journey 6M",
    "nash-p": "Journey 6P",
}

IMAGE_TYPES = ("rgb", "bgr", "yuv444", "gray")
TRAIN_TYPES = ("rgb", "bgr", "yuv444", "gray", "featuremap")
RT_TYPES = ("rgb", "bgr", "yuv444", "nv12", "gray", "featuremap",
            "rgb_128", "bgr_128", "yuv444_128", "gray_128")  # *_128: value - 128 as int8 (Horizon's RGB_128 ...)
LAYOUTS = ("NCHW", "NHWC")
NORM_TYPES = ("no_preprocess", "data_mean", "data_scale", "data_mean_and_scale")
# Which input_type_rt each input_type_train may be fed as at run time.
TRAIN_TO_RT = {
    "rgb": ("nv12", "yuv444", "rgb", "bgr", "yuv444_128", "rgb_128", "bgr_128"),
    "bgr": ("nv12", "yuv444", "rgb", "bgr", "yuv444_128", "rgb_128", "bgr_128"),
    "yuv444": ("nv12", "yuv444", "yuv444_128"),
    "gray": ("gray", "gray_128"),
    "featuremap": ("featuremap",),
}
# Channel count implied by an image type.
TYPE_CHANNELS = {"rgb": 3, "bgr": 3, "yuv444": 3, "gray": 1}
INPUT_SOURCES = ("ddr", "pyramid", "resizer")
NODE_INFO_ON = ("BPU", "CPU")
NODE_INFO_DTYPES = ("int8", "int16")
# node_info InputType values of the 4-bit path (docs/int4.md); WeightType values
NODE_INFO_INPUT_DTYPES = NODE_INFO_DTYPES + ("uint4", "int4")
NODE_INFO_WEIGHT_TYPES = ("int8", "int4")
# per-node weight remedies (hbtool): clip the range by MSE, correct the bias, learn the rounding
NODE_INFO_WEIGHT = ("mse", "bias_correction", "adaround")
CAL_DATA_TYPES = ("float32", "uint8", "int8", "int16", "int32", "int64")
CALIBRATION_TYPES = ("default", "max", "kl", "mix", "load", "skip", "mse", "percentile")
# calibration types that read no calibration data
CALIBRATION_WITHOUT_DATA = ("load", "skip")
PERCENTILE_DEFAULT = 0.99995


def _g(*keys: Key) -> dict[str, Key]:
    return {k.name: k for k in keys}


MODEL = _g(
    Key("onnx_model", "path",
        "The float ONNX model to convert. Required, unless the command gets the model on its "
        "command line.", default_doc="required"),
    Key("caffe_model", "path", "Caffe weights file.",
        unsupported=("Caffe models are not supported",
                     "convert the model to ONNX and give it as model_parameters.onnx_model")),
    Key("prototxt", "path", "Caffe network description.",
        unsupported=("Caffe models are not supported",
                     "convert the model to ONNX and give it as model_parameters.onnx_model")),
    Key("march", "enum",
        "Target micro-architecture: `bayes` (Journey 5, RDK Ultra), `bayes-e` (RDK X5) or "
        "`bernoulli2` (RDK X3, Journey 3).",
        default="bayes", allowed=SUPPORTED_MARCH),
    Key("working_dir", "path",
        "Folder for every file the run writes (staged models, artifact, logs). Created if "
        "missing.", default="model_output"),
    Key("output_model_file_prefix", "str",
        "Name prefix of the files written to working_dir, e.g. "
        "`<prefix>_quantized_model.onnx`.", default_doc="onnx_model file name without extension"),
    Key("layer_out_dump", "bool",
        "Also expose every BPU layer's output, dequantized, as a model output named "
        "`<tensor>_layer_out` (artifact and simulate), to compare layer by layer. Slows the "
        "model; for debugging only.", default=False),
    Key("log_level", "enum", "Which log records hb_calibrate.log and hb_compile.log keep (appended "
        "under `log (level ...)`), whatever the console shows.", default="info",
        allowed=("debug", "info", "warn", "error")),
    Key("output_nodes", "names",
        "Use these nodes' outputs as the model outputs instead of the graph's own outputs.",
        default=[]),
    Key("remove_node_type", "enum_list",
        "Remove nodes of these types where they sit directly at a model input (Quantize, "
        "Transpose) or output (Dequantize, Transpose, Cast, Reshape, Softmax) of the compiled "
        "model, in the order given, as hb_model_modifier does: without the input Quantize the "
        "artifact takes int8/int16 codes, without the output Dequantize it returns integer codes; "
        "the scales are recorded in the artifact (`removed_nodes`).", default=[],
        allowed=("Quantize", "Dequantize", "Transpose", "Cast", "Reshape", "Softmax")),
    Key("remove_node_name", "names",
        "Remove these compiled-program nodes (names as `hbtool info` lists them), each of which "
        "must sit directly at a model input or output (as remove_node_type).",
        default=[]),
    Key("node_info", "node_info",
        "Per-node overrides: `{node: {ON: BPU|CPU, InputType: int8|int16, InputType<i>: ..., "
        "OutputType: int8|int16, Weight: mse|bias_correction|adaround}}`, or the short form "
        "`'node1:int16;node2:int16'` (input and output in int16); `InputType: uint4|int4, WeightType: int4` "
        "puts a Conv/Gemm/MatMul on the 4-bit path (docs/int4.md). Overrides run_on_cpu / "
        "run_on_bpu. `Weight` (hbtool) applies one weight remedy to that node only, as "
        "`hbtool debug --auto` writes it.", default={},
        allowed_doc="`ON`: BPU, CPU; `InputType`, `InputType<i>`, `OutputType`: int8, int16; "
                    "`InputType` also uint4, int4; `WeightType`: int8, int4; "
                    "`Weight`: mse, bias_correction, adaround"),
    Key("set_node_data_type", "node_info",
        "Older form of node_info (`'node:int16;...'`); merged into node_info.", default={},
        allowed_doc="as node_info"),
    Key("debug_mode", "enum_list",
        "Extra debug output. `dump_calibration_data` writes Horizon's "
        "`<working_dir>/calibration_data/<input>/<k>.npy` (sample k as the model with its "
        "preprocessing takes it); `dump_all_layers_output` is layer_out_dump; `dump_all_models` "
        "is what calibrate always does (every stage model is written); "
        "`check_model_output_consistency` is refused: use `hbtool simulate --compare`.", default=[],
        allowed=("dump_calibration_data", "dump_all_models", "dump_all_layers_output",
                 "check_model_output_consistency")),
)

INPUT = _g(
    Key("input_name", "str",
        "Model input names, in the order every other per-input list follows. Required when the "
        "model has more than one input.", per_input=True,
        default_doc="the model's only input"),
    Key("input_type_train", "enum",
        "What the model was trained on: an image colour space, or `featuremap` for any other "
        "tensor (any rank and dtype, e.g. int64 token ids).", per_input=True, broadcast=True,
        default="featuremap", allowed=TRAIN_TYPES),
    Key("input_type_rt", "enum",
        "What the deployed model is fed at run time. Must be reachable from input_type_train "
        "(see below; a `*_128` type is allowed where its base type is: the same pixels minus 128 as "
        "int8). When it (or `input_layout_rt`) differs from the training one, the compiled model and "
        "the quantized ONNX take the chip's uint8 buffer (nv12: Y plane then interleaved UV, "
        "H*W*3/2 bytes) and convert it in integers (docs/inputs.md).", per_input=True, broadcast=True, allowed=RT_TYPES,
        default_doc="input_type_train"),
    Key("input_layout_train", "enum",
        "Layout of the model's input. Required for image types; optional for featuremap "
        "(then it names the channel axis for mean/scale).", per_input=True, broadcast=True,
        allowed=LAYOUTS, default_doc="none"),
    Key("input_layout_rt", "enum",
        "Layout the deployed model is fed in. Not used for nv12.", per_input=True,
        broadcast=True, allowed=LAYOUTS, default_doc="input_layout_train"),
    Key("input_space_and_range", "enum",
        "Value range of nv12 input: `regular` is 0-255, `bt601_video` is 16-235 (Y).",
        per_input=True, broadcast=True, default="regular", allowed=("regular", "bt601_video")),
    Key("input_shape", "shape",
        "Fixed input shape, e.g. `1x3x224x224`; replaces the model's (possibly dynamic) shape. "
        "Positive integers only; `scalar` for a rank-0 input (an audio model's sample rate), e.g. "
        "`1x1x16000;scalar`.", per_input=True, default_doc="the model's shape"),
    Key("input_batch", "int",
        "Batch size of the compiled model. hbtool compiles the batch of the input shape, so "
        "only 1 is accepted: export the model with the batch you want instead.", default=1, min=1,
        max=128),
    Key("separate_batch", "bool",
        "With input_batch > 1, one input per batch item; refused, as input_batch > 1 is.",
        default=False),
    Key("norm_type", "enum",
        "Preprocessing built into the model: `data_mean` subtracts mean_value, `data_scale` "
        "multiplies by scale_value, `data_mean_and_scale` does `(x - mean) * scale`.",
        per_input=True, broadcast=True, default="no_preprocess", allowed=NORM_TYPES),
    Key("mean_value", "floats",
        "Mean to subtract: one number, or one per channel separated by spaces "
        "(`123.675 116.28 103.53`). `None` for an input without one.", per_input=True,
        default_doc="none"),
    Key("scale_value", "floats",
        "Factor to multiply by after the mean: one number, or one per channel. `None` for an "
        "input without one.", per_input=True, default_doc="none"),
)

CALIBRATION = _g(
    Key("cal_data_dir", "path",
        "Folder of calibration samples, one folder per input. Not needed for "
        "calibration_type load or skip.", per_input=True, default_doc="none"),
    Key("cal_data_type", "enum",
        "Element type of raw (tofile) calibration files.", per_input=True, broadcast=True,
        allowed=CAL_DATA_TYPES,
        default_doc="float32 if the folder name ends in `_f32` or the input is a featuremap, "
                    "else uint8"),
    Key("preprocess_on", "bool",
        "Resize calibration images to input_shape. Unset: hbtool resizes images of another "
        "size; an explicit false makes a wrong size an error.", default=None,
        default_doc="unset (resize)"),
    Key("calibration_type", "enum",
        "How activation ranges are chosen. `default` tries max, percentile and kl and keeps the "
        "best on the output; `mix` searches per node; `load` takes scales from a QAT model; "
        "`skip` uses random data (speed checks only); `mse` and `percentile` are hbtool's.",
        default="default", allowed=CALIBRATION_TYPES),
    Key("max_percentile", "float",
        "Percentile of |x| kept by `max` and `percentile` calibration (1.0 = true max). Other "
        "methods do not use it.", default=1.0, min=0.0, max=1.0, min_exclusive=True,
        default_doc=f"1.0 ({PERCENTILE_DEFAULT} with calibration_type percentile)"),
    Key("per_channel", "bool", "Per-output-channel weight scales.", default=True),
    Key("run_on_cpu", "names", "Nodes to keep on the CPU (merged into node_info).", default=[]),
    Key("run_on_bpu", "names", "Nodes to force onto the BPU (merged into node_info).",
        default=[]),
    Key("enable_int16", "bool", "Run every BPU node that supports int16 in int16.",
        default=False),
    Key("optimization", "optimization",
        "Horizon's precision switches: `set_model_output_int8|16` (the nodes producing the model "
        "outputs), `set_all_nodes_int16` (as enable_int16), `set_<Op>_input_int8|16` / "
        "`set_<Op>_output_int8|16` (every node of ONNX type `<Op>`; `set_Softmax_input_int8` keeps "
        "a Softmax in int8 on the BPU), `bias_correction` (as bias_correction: true). "
        "`asymmetric`, `lstm_batch_last` and `run_fast` are refused with the reason.", default=[],
        allowed_doc="see the description; `,` or `;` separated"),
    Key("auto_int16", "bool",
        "Move to int16 the tensors whose int8 form would have a signal-to-noise ratio below "
        "30 dB, and the inputs/outputs of LayerNorm, Softmax and table (LUT) ops.",
        default=True, origin=HBTOOL),
    Key("num_samples", "int", "Use at most this many calibration samples.", default=None,
        min=1, origin=HBTOOL, default_doc="all samples"),
    Key("batch_size", "int", "Samples read per step of the statistics pass (the model itself runs at its "
        "input's batch size, so the statistics do not depend on it; memory does).", default=8, min=1,
        origin=HBTOOL),
    Key("default_precision", "enum",
        "Tensor-unit precision of the model: `int4` gives every eligible Conv/Gemm/MatMul int4 weights "
        "and uint4 (post-ReLU) or int4 inputs; the first and the output layer stay int8 (docs/int4.md).",
        default="int8", allowed=("int8", "int4"), origin=HBTOOL),
    Key("weight_clip", "enum",
        "Weight range: `none` uses the true max; `mse` clips to the range with the least "
        "squared error.", default="none", allowed=("none", "mse"), origin=HBTOOL),
    Key("bias_correction", "bool",
        "Correct each layer's bias (depthwise and grouped convs included) for the mean shift "
        "that weight quantization causes, from the per-channel input means of the calibration "
        "data (on by default, as in NNCF; `false` keeps the rounded weights' biases).",
        default=True, origin=HBTOOL),
    Key("adaround", "bool",
        "Learn the rounding direction of each weight (AdaRound) instead of rounding to "
        "nearest. Slower.", default=False, origin=HBTOOL),
    Key("ptf", "bool",
        "FQ-ViT power-of-two factors: a LayerNorm input whose channels differ in range (a "
        "residual stream) gets per-channel scales s*2^alpha (alpha 0..3), kept exact by its "
        "producer, the LayerNorm and the residual Add that read it.", default=False, origin=HBTOOL),
    Key("softmax_log2", "bool",
        "FQ-ViT log2 quantizer: a Softmax read only by the attention MatMul (probabilities @ V) "
        "outputs 4-bit codes k for 2^-k, and that MatMul becomes shifts and additions.",
        default=False, origin=HBTOOL),
    Key("smooth_quant", "bool",
        "SmoothQuant scale migration: a Linear/MatMul whose input has outlier channels gets "
        "per-channel factors moved from the input into its weight, folded into the producing "
        "LayerNorm (or Linear) in the float model.", default=False, origin=HBTOOL),
    Key("smooth_alpha", "float",
        "Migration strength of smooth_quant: s_j = max|X_j|^alpha / max|W_j|^(1-alpha).",
        default=0.5, min=0.0, max=1.0, origin=HBTOOL),
)

COMPILER = _g(
    Key("compile_mode", "enum",
        "What the compiler optimizes for: `latency`, DDR `bandwidth`, or a `balance` of the two "
        "set by balance_factor.", default="latency", allowed=("latency", "bandwidth", "balance")),
    Key("balance_factor", "int",
        "With compile_mode balance: 0 favours bandwidth, 100 favours latency.", default=50,
        min=0, max=100),
    Key("debug", "bool", "Also write `<prefix>_layer_details.json` beside the artifact: the "
        "perf estimate of every layer (hb_perf's Layer Details).", default=False),
    Key("core_num", "int", "BPU cores the model runs on.", default=1, min=1, max=2,
        allowed_doc="1 or 2"),
    Key("optimize_level", "enum",
        "Compiler effort: `O0` fastest to compile, `O3` fastest model (use for deployment).",
        default="O3", allowed=("O0", "O1", "O2", "O3")),
    Key("input_source", "input_source",
        "Where each input comes from on the chip: `{input_name: ddr|pyramid|resizer}`; the key "
        "`_default_value` sets the rest.", default={}, allowed_doc="ddr, pyramid, resizer",
        default_doc="pyramid for nv12/gray input_type_rt, else ddr"),
    Key("max_time_per_fc", "int",
        "Split the model into preemptible function calls of at most this many microseconds. "
        "hbtool does not split: only 0 is accepted.", default=0, min=0, max=4294967295,
        allowed_doc="0, or 1000 to 4294967295"),
    Key("jobs", "int", "Most parallel compile processes. hbtool compiles in one process, which "
        "any value allows; recorded in the artifact's options.", default=None, min=1,
        default_doc="no limit"),
    Key("advice", "int",
        "After compiling, print the ops whose estimated time exceeds this many microseconds, "
        "with what bounds each. 0 = off.", default=0, min=0),
    Key("rounding", "enum",
        "How every right shift of the integer program rounds (requantization, tables, "
        "LayerNorm/Softmax). The J5's mode is not published; `half_up` is what Horizon's "
        "simulator results are consistent with. Calibrate's quantized model uses the same mode.",
        default="half_up", allowed=("half_up", "half_even", "half_away", "floor"), origin=HBTOOL),
    Key("abort_on_fail", "bool",
        "Stop with an error when a node meant for the BPU cannot be compiled for it, instead "
        "of falling back to the CPU.", default=False, origin=HBTOOL),
)

QAT = _g(
    Key("epochs", "int", "Training epochs (passes over the training data); `steps` overrides it.",
        default=3, min=1, origin=HBTOOL),
    Key("steps", "int", "Optimizer steps; when set, used instead of `epochs`.", default=None, min=1,
        origin=HBTOOL, default_doc="epochs x batches per epoch"),
    Key("lr", "float", "Learning rate.", default=1e-4, min=0.0, min_exclusive=True,
        origin=HBTOOL),
    Key("batch_size", "int", "Global training batch size (split over the processes of a "
        "distributed run).", default=32, min=1, origin=HBTOOL),
    Key("optimizer", "enum", "Optimizer.", default="adamw", allowed=("sgd", "adam", "adamw"),
        origin=HBTOOL),
    Key("weight_decay", "float", "Weight decay.", default=0.0, min=0.0, origin=HBTOOL),
    Key("train_data_dir", "path", "Folder of training samples, read like cal_data_dir (one "
        "sub-folder per input, named after it, for several inputs).",
        default=None, origin=HBTOOL, default_doc="the calibration data"),
    Key("labels", "path", "Integer labels, one per training sample in sorted-file order (`.npy` "
        "or one per line); needed by `loss: ce`.", default=None, origin=HBTOOL, default_doc="none"),
    Key("loss", "enum", "`distill`: match the float model's outputs (and `distill_tensors`), no "
        "labels needed; `kl`: distill by the KL divergence of the softmax over the last axis, "
        "per position, of each output (of its logits where the output is a Softmax: classifiers, "
        "CTC recognisers); `ce`: cross entropy of the first output against `labels`.",
        default="distill", allowed=("distill", "kl", "ce"), origin=HBTOOL),
    Key("temperature", "float", "`loss: kl`: the softmax temperature of the per-position KL "
        "divergence (above 1 weighs the runners-up more).", default=1.0, min=0.0,
        min_exclusive=True, origin=HBTOOL),
    Key("lr_schedule", "enum", "`constant`, or `cosine`: linear warm-up over the first 5% of "
        "the steps, then cosine decay to 0.", default="constant", allowed=("constant", "cosine"),
        origin=HBTOOL),
    Key("distill_tensors", "names", "Intermediate tensors of the optimized float model whose "
        "float values the quantized ones also match (`loss: distill`).", default=[],
        origin=HBTOOL, default_doc="none"),
    Key("train_scales", "bool", "Train the activation scales too (LSQ), besides the weights.",
        default=False, origin=HBTOOL),
    Key("augment", "enum_list", "Augmentations of image inputs: horizontal flips, shifted crops, "
        "colour jitter.", default=[], allowed=("flip", "crop", "color"), origin=HBTOOL,
        default_doc="none"),
    Key("val_samples", "int", "Samples held out of training to measure the output cosine vs "
        "float before and after (when the data has more than twice as many).", default=32,
        min=1, origin=HBTOOL),
    Key("checkpoint_every", "int", "Write `<prefix>_qat_checkpoint.pt` every this many steps "
        "(`hbtool qat --resume` continues from it). 0 = only at the end.", default=0, min=0,
        origin=HBTOOL),
    Key("seed", "int", "Random seed.", default=0, min=0, origin=HBTOOL),
    Key("device", "enum", "Torch device; `auto` uses a GPU when there is one; `cuda` without "
        "one is an error.", default="auto", allowed=("auto", "cpu", "cuda"), origin=HBTOOL),
)

DEBUG = _g(
    Key("metric", "metric", "What the per-node sensitivity ranking and `hbtool debug --auto` "
        "follow: a built-in error metric of the worst model output, or a task metric "
        "`module:function` (the module beside the YAML or on PYTHONPATH) called as "
        "`function(quantized_outputs, float_outputs) -> float` with dicts of output name to the "
        "outputs stacked over the samples, higher is better.", default="cosine",
        allowed=("cosine", "mse", "mre", "sqnr", "chebyshev"),
        allowed_doc="cosine, mse, mre, sqnr, chebyshev, or `module:function`", origin=HBTOOL),
    Key("data_dir", "path", "Samples for `hbtool debug` (same format as cal_data_dir): a folder for a "
        "one-input model, or a folder holding one sub-folder per input name.", default=None,
        origin=HBTOOL, default_doc="the calibration data"),
    Key("report_dir", "path", "Where the debug report (HTML, PNG, JSON) goes.", default=None,
        origin=HBTOOL, default_doc="`<working_dir>/debug`"),
    Key("auto_int16_threshold", "float",
        "Not used: auto_int16 ranks tensors by their int8 signal-to-noise ratio.",
        unsupported=("auto_int16 promotes by the int8 signal-to-noise ratio, not by a cosine threshold, so this "
                     "key would be ignored",
                     "remove it; for a cosine target run hbtool debug --auto --target-cosine 0.99")),
    Key("top_k", "int", "Nodes listed in the sensitivity ranking.", default=10, min=1,
        origin=HBTOOL),
    Key("num_samples", "int", "Samples used by the analysis.", default=8, min=1,
        origin=HBTOOL),
)

GATE = _g(
    Key("data_dir", "path", "Held-out samples for the accuracy gates (same format as cal_data_dir): a folder for "
        "a one-input model, or a folder holding one sub-folder per input name. Not the calibration set.",
        default=None, origin=HBTOOL, default_doc="none (the accuracy gates need it)"),
    Key("min_output_cosine", "float", "Least cosine similarity, artifact (simulated) vs the float model on "
        "data_dir, of every output and of every output channel (a class-score channel quantized to zero fails "
        "even when the whole output's cosine is 0.99).", default=None, min=-1.0, max=1.0, origin=HBTOOL,
        default_doc="no gate"),
    Key("min_metric", "float", "Least value of debug_parameters.metric (the artifact's outputs against the "
        "float model's) on data_dir.", default=None, origin=HBTOOL, default_doc="no gate"),
    Key("max_metric_drop", "float", "Largest drop of debug_parameters.metric from the float model's own value "
        "(metric(float, float) - metric(artifact, float)) on data_dir.", default=None, min=0.0, origin=HBTOOL,
        default_doc="no gate"),
    Key("min_fps", "float", "Least estimated frames per second (hbtool perf) on the config's march.",
        default=None, min=0.0, min_exclusive=True, origin=HBTOOL, default_doc="no gate"),
    Key("max_latency_ms", "float", "Largest estimated latency of one frame in milliseconds (hbtool perf).",
        default=None, min=0.0, min_exclusive=True, origin=HBTOOL, default_doc="no gate"),
    Key("max_cpu_nodes", "int", "Most model nodes the artifact runs on the CPU (the nodes of its CPU "
        "subgraphs; the input quantize and output dequantize are not counted).", default=None, min=0,
        origin=HBTOOL, default_doc="no gate"),
    Key("max_artifact_mb", "float", "Largest artifact file size in MB (10^6 bytes).", default=None, min=0.0,
        min_exclusive=True, origin=HBTOOL, default_doc="no gate"),
    Key("bit_exact_samples", "int", "The simulated artifact must equal the quantized ONNX bit for bit on the "
        "first this many samples of data_dir.", default=None, min=1, origin=HBTOOL, default_doc="no gate"),
)

# Group name -> (key table, one-line description). Order is the order of the docs and of raw.
GROUPS: dict[str, tuple[dict[str, Key], str]] = {
    "model_parameters": (MODEL, "The model, the target and where outputs go."),
    "input_parameters": (INPUT, "One entry per model input: types, layouts, shape and the "
                                "preprocessing built into the model."),
    "calibration_parameters": (CALIBRATION, "Post-training quantization (PTQ)."),
    "compiler_parameters": (COMPILER, "Compiling the quantized model into the BPU artifact."),
    "qat_parameters": (QAT, "Quantization-aware training (`hbtool qat`); hbtool's own group."),
    "debug_parameters": (DEBUG, "Accuracy analysis (`hbtool debug`) and auto int16; hbtool's "
                                "own group."),
    "gate_parameters": (GATE, "Gates a CI job or a release is judged by (`hbtool makertbin`, `hbtool gate`, "
                              "`hbtool release`): every key is optional and a key present is a gate; a failed "
                              "gate is exit code 4 (docs/ci.md); hbtool's own group."),
}

# Groups Horizon has that hbtool refuses, with problem and fix.
UNSUPPORTED_GROUPS = {
    "custom_op": ("custom CPU operators are not supported",
                  "remove the custom_op group; replace the custom op in the ONNX model with "
                  "standard ONNX ops"),
}

# hbtool's own groups whose command does not exist yet: refused when any key is given, so that
# no setting is accepted and ignored (the key tables stay, for the typed defaults).
RESERVED_GROUPS = {
}

# Per-input keys that live in calibration_parameters but follow the inputs.
PER_INPUT_KEYS: dict[str, tuple[str, Key]] = {
    name: (group, key)
    for group, (table, _) in GROUPS.items()
    for name, key in table.items()
    if key.per_input
}


def all_keys() -> list[tuple[str, Key]]:
    """Every (group, key) pair, in docs order."""
    return [(group, key) for group, (table, _) in GROUPS.items() for key in table.values()]
