"""The import's folds have onnxruntime write the weights beside the optimized model file and read them back
(``hbtool.ir.optimized_model_file``): the folded model is the same message, byte for byte, as with the weights
written inside the file, and the model file itself holds no weight."""

from __future__ import annotations

import os

import onnx
import pytest

from hbtool.ir import onnx_import, optimized_model_file
from tests.unit.ir.test_fold_in_memory import _model


def _folded(model: onnx.ModelProto, monkeypatch, beside: bool) -> tuple[bytes, list[int]]:
    """The fold's model serialized, and the sizes of the model files onnxruntime wrote."""
    sizes: list[int] = []
    read = optimized_model_file.read_optimized_model

    def reading(path):
        sizes.append(os.path.getsize(path))
        return read(path) if beside else onnx.load(str(path))

    monkeypatch.setattr(onnx_import, "read_optimized_model", reading)
    if not beside:
        monkeypatch.setattr(onnx_import, "weights_beside", lambda options, min_bytes: None)
    monkeypatch.setattr(onnx_import, "SET_ASIDE_MIN_BYTES", 1024)
    folded = onnx_import._fold_with_onnxruntime(model)
    monkeypatch.undo()
    return folded.SerializeToString(), sizes


@pytest.mark.parametrize("opset", [11, 17])
def test_weights_read_back_from_beside_the_file_give_the_same_model(opset, monkeypatch):
    inside, inside_sizes = _folded(_model(opset), monkeypatch, beside=False)
    beside, beside_sizes = _folded(_model(opset), monkeypatch, beside=True)
    assert beside == inside
    weights = sum(len(t.raw_data) for t in onnx.ModelProto.FromString(inside).graph.initializer)
    assert inside_sizes[0] > weights > 10 * beside_sizes[0]   # the weights were in the side file


def test_a_model_without_large_weights_reads_as_onnx_load(tmp_path):
    model = _model(17)
    del model.graph.initializer[:]
    onnx.save(model, str(tmp_path / "m.onnx"))
    assert optimized_model_file.read_optimized_model(tmp_path / "m.onnx") == onnx.load(str(tmp_path / "m.onnx"))
