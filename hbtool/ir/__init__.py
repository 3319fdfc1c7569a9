"""The IR shared by every stage: graph, ONNX import/export, shape helpers, passes."""

from hbtool.ir.graph import HBTOOL_DOMAIN, Graph, Node, Value

# the ONNX import/export functions load on first use: they import onnx, which (through ml_dtypes)
# cost every process about a second, and ``hbtool simulate`` reads the IR without writing ONNX
_LAZY = {"save_onnx": "onnx_export", "to_onnx": "onnx_export", "import_onnx": "onnx_import", "load_onnx": "onnx_import"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"hbtool.ir.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'hbtool.ir' has no attribute {name!r}")

__all__ = ["HBTOOL_DOMAIN", "Graph", "Node", "Value", "import_onnx", "load_onnx", "save_onnx", "to_onnx"]
