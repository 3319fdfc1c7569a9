"""An op whose output size depends on the data is refused in one line, exit 1 (issue 30).

torch_geometric's GCN and GAT keep the edges that are not self-loops with ``NonZero``; the exporter
wrote the count of its example graph and every later shape was folded from it, so a graph with
another count failed inside onnxruntime during calibration: ``invalid expand shape``, exit 3.
A deployed model has one shape per tensor, so such an op cannot be deployed: the import says so,
naming the node; a ``NonZero`` on constants has one size and is accepted.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from hbtool.cli import main
from hbtool.errors import NotDeployableError
from hbtool.ir.onnx_import import import_onnx
from tests.helpers import make_model, tensor, vinfo


def _edges_without_self_loops(const_mask: bool):
    """edge_index-like x (1, 8) -> mask (x != 0) -> NonZero -> indices of kept columns -> Gather of x."""
    mask_source = "m" if const_mask else "x"
    nodes = [helper.make_node("Cast", [mask_source], ["mask"], to=TensorProto.BOOL),
             helper.make_node("NonZero", ["mask"], ["nz"], name="keep_edges"),
             helper.make_node("Squeeze", ["nz_row"], ["cols"]),
             helper.make_node("Gather", ["x", "cols"], ["y"], axis=1)]
    nodes.insert(2, helper.make_node("Gather", ["nz", "one"], ["nz_row"], axis=0))
    inits = [tensor("one", np.array([1], np.int64)), tensor("m", np.array([[1, 0, 1, 1, 0, 1, 1, 1]], np.float32))]
    return make_model(nodes, [vinfo("x", [1, 8])], [vinfo("y", [1, 6] if const_mask else [1, "n"])], inits)


def test_a_nonzero_on_data_is_refused_naming_the_node(tmp_path):
    with pytest.raises(NotDeployableError, match="'keep_edges' \\(NonZero\\).*depends on the input data"):
        import_onnx(_edges_without_self_loops(const_mask=False))
    path = tmp_path / "m.onnx"
    onnx.save(_edges_without_self_loops(const_mask=False), path)
    r = CliRunner().invoke(main, ["checker", "--model", str(path), "--march", "bayes-e", "--output-dir", str(tmp_path / "c")])
    assert r.exit_code == 1, r.output
    assert "keep_edges" in r.output and "fix:" in r.output and "Traceback" not in r.output


def test_a_nonzero_on_constants_is_accepted():
    graph = import_onnx(_edges_without_self_loops(const_mask=True))    # one size for every input
    assert tuple(graph.shape("y")) == (1, 6)
