"""The IR shared by every stage: graph, ONNX import/export, shape helpers, passes."""

from hbtool.ir.graph import HBTOOL_DOMAIN, Graph, Node, Value
from hbtool.ir.onnx_export import save_onnx, to_onnx
from hbtool.ir.onnx_import import import_onnx, load_onnx

__all__ = ["HBTOOL_DOMAIN", "Graph", "Node", "Value", "import_onnx", "load_onnx", "save_onnx", "to_onnx"]
