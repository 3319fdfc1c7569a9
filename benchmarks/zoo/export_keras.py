"""Export ``keras.applications`` classifiers to ONNX with tf2onnx; runs inside a separate TensorFlow venv.

TensorFlow stays out of the project venv. Create that venv with

    python3 -m venv ~/venvs/tf-export
    ~/venvs/tf-export/bin/pip install tensorflow-cpu tf2onnx
    export HBTOOL_KERAS_PYTHON=~/venvs/tf-export/bin/python     # or export.py --keras-python

(TensorFlow 2.21 and tf2onnx 1.17 here.) ``export.py`` calls this script with that venv's python,
one model per call:

    $HBTOOL_KERAS_PYTHON benchmarks/zoo/export_keras.py APP SIZE OPSET OUT.onnx

Weights are Keras's own initialisation under ``keras.utils.set_random_seed(0)``
(``weights=None``; nothing downloaded), the head without its Softmax
(``classifier_activation=None``: random logits are informative, a 1000-way Softmax of them is
flat). The model is saved as a SavedModel (Keras 3 ``model.export``) and converted by
``python -m tf2onnx.convert --saved-model``: an NHWC input, tf2onnx's own op patterns. The input
is renamed ``input`` (tf2onnx names it ``keras_tensor_<k>``, a counter that changes between runs).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("app")
    ap.add_argument("size", type=int)
    ap.add_argument("opset", type=int)
    ap.add_argument("out")
    args = ap.parse_args()
    import keras
    import onnx

    keras.utils.set_random_seed(0)
    model = getattr(keras.applications, args.app)(weights=None, input_shape=(args.size, args.size, 3), classifier_activation=None)
    with tempfile.TemporaryDirectory() as tmp:
        saved = os.path.join(tmp, "saved_model")
        model.export(saved, verbose=False)
        raw = os.path.join(tmp, "raw.onnx")
        subprocess.run([sys.executable, "-m", "tf2onnx.convert", "--saved-model", saved, "--output", raw,
                        "--opset", str(args.opset)], check=True, capture_output=True)
        m = onnx.load(raw)
    old = m.graph.input[0].name
    m.graph.input[0].name = "input"
    for node in m.graph.node:
        node.input[:] = ["input" if i == old else i for i in node.input]
    onnx.save(m, args.out)


if __name__ == "__main__":
    main()
