"""Reading back the model file onnxruntime writes for ``optimized_model_filepath``, its weights in a side file.

Why: every import folds the model with onnxruntime (``hbtool.ir.onnx_import._fold_with_onnxruntime``), which writes
the optimized model to a file that hbtool parses back. With the weights inside that file onnxruntime copies each
into a protobuf message and serializes it, and ``onnx.load`` parses 100 MB back (ResNet50: twice per import). Asked to
put the large initializers in a side file, onnxruntime writes their bytes as they are, the model file is a few
hundred kB, and each weight is read once into its tensor's ``raw_data`` (ResNet50: about 0.1 CPU s less per fold).
The message read back is the one a file with the weights inside gives, field for field (the side-file bookkeeping is
cleared: ``tests/unit/ir/test_optimized_model_file.py``), so nothing after the fold changes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx

#: the side file's name, next to the model file onnxruntime writes
WEIGHTS_FILE = "weights.bin"


def weights_beside(options: Any, min_bytes: int) -> None:
    """Ask onnxruntime (``options``: its ``SessionOptions``) to write every initializer of ``min_bytes`` or more of
    the optimized model to :data:`WEIGHTS_FILE` beside the model file instead of into it."""
    options.add_session_config_entry("session.optimized_model_external_initializers_file_name", WEIGHTS_FILE)
    options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", str(min_bytes))


def read_optimized_model(path: str | Path) -> onnx.ModelProto:
    """The optimized model at ``path`` with the initializers of its side file read back into ``raw_data``, as if
    onnxruntime had written them inside the model file.

    onnxruntime gives each such tensor an empty ``doc_string`` and the external ``data_location``; a tensor it
    writes inside the file has neither field set, so both are cleared (with ``external_data``)."""
    path = Path(path)
    model = onnx.load(str(path), load_external_data=False)
    external = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    if not external:
        return model
    with open(path.parent / WEIGHTS_FILE, "rb") as data:
        for tensor in external:
            info = {entry.key: entry.value for entry in tensor.external_data}
            if info.get("location") != WEIGHTS_FILE:
                raise ValueError(f"initializer '{tensor.name}' of the optimized model is in '{info.get('location')}', "
                                 f"not in {WEIGHTS_FILE}")
            data.seek(int(info.get("offset", 0)))
            tensor.raw_data = data.read(int(info["length"]))
            tensor.ClearField("external_data")
            tensor.ClearField("data_location")
            if not tensor.doc_string:
                tensor.ClearField("doc_string")
    return model
