"""Export PyTorch models built by other packages' own modules; runs inside the export venv, not the project's.

The venv is the timm one (``$HBTOOL_TIMM_PYTHON``, ``export_timm.py``) with two more packages:

    $HBTOOL_TIMM_PYTHON -m pip install --no-deps facenet-pytorch==2.6.0   # MTCNN's trained weights ship in the wheel
    $HBTOOL_TIMM_PYTHON -m pip install torch_geometric==2.8.1

``export.py`` calls it one model per call:

    $HBTOOL_TIMM_PYTHON benchmarks/zoo/export_torch.py NAME OPSET OUT.onnx [--shape 1x3x24x24] [--graph NODES FEATURES EDGES]

* ``mtcnn_pnet`` / ``mtcnn_rnet`` / ``mtcnn_onet``: facenet-pytorch's ``PNet``/``RNet``/``ONet`` with
  ``pretrained=True`` (the ``data/*.pt`` state dicts inside the wheel; nothing downloaded), PRelu
  after every conv; the face probability is the first output (``prob``), then the box regression
  (``box``) and O-Net's five landmarks (``landmarks``);
* ``pyg_gcn`` / ``pyg_graphsage`` / ``pyg_gat``: two torch_geometric message-passing layers
  (``GCNConv``, ``SAGEConv``, ``GATConv`` with 4 heads) with a ReLU/ELU between, random weights under
  ``torch.manual_seed(0)``; inputs ``x`` (nodes x features) and the int64 ``edge_index`` (2 x edges),
  fixed sizes, output ``out`` (nodes x 8). GCN and GAT add self-loops by default, which
  torch_geometric does with ``NonZero`` (a size that depends on the graph: hbtool refuses it);
  ``pyg_gcn_no_self_loops`` is the same GCN with ``add_self_loops=False`` (the self-loops, where
  wanted, given in ``edge_index``). (GAT with ``add_self_loops=False`` exports a model that onnxruntime
  cannot load: ``/a/Sub`` incompatible dimensions; hbtool says so, exit 2.)
"""

from __future__ import annotations

import argparse
import warnings

import torch


class ProbFirst(torch.nn.Module):
    """MTCNN nets return ``(box, [landmarks,] prob)``: put the face probability first."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        out = self.inner(x)
        return (out[-1], *out[:-1])


def mtcnn(name: str) -> tuple[torch.nn.Module, list[str]]:
    from facenet_pytorch.models.mtcnn import ONet, PNet, RNet

    net = {"mtcnn_pnet": PNet, "mtcnn_rnet": RNet, "mtcnn_onet": ONet}[name](pretrained=True).eval()
    return ProbFirst(net), ["prob", "box"] + (["landmarks"] if name == "mtcnn_onet" else [])


class TwoLayers(torch.nn.Module):
    """Two message-passing layers of one kind, as torch_geometric's examples stack them."""

    def __init__(self, kind: str, features: int, hidden: int = 32, out: int = 8):
        super().__init__()
        from torch_geometric import nn as gnn

        loops = not kind.endswith("_no_self_loops")     # the default adds self-loops (NonZero: a data-dependent size)
        kind = kind.removesuffix("_no_self_loops")
        if kind == "pyg_gcn":
            self.a, self.b = gnn.GCNConv(features, hidden, add_self_loops=loops), gnn.GCNConv(hidden, out, add_self_loops=loops)
            self.act = torch.relu
        elif kind == "pyg_graphsage":
            self.a, self.b, self.act = gnn.SAGEConv(features, hidden), gnn.SAGEConv(hidden, out), torch.relu
        elif kind == "pyg_gat":
            self.a = gnn.GATConv(features, hidden // 4, heads=4, add_self_loops=loops)
            self.b, self.act = gnn.GATConv(hidden, out, heads=1, add_self_loops=loops), torch.nn.functional.elu
        else:
            raise ValueError(kind)

    def forward(self, x, edge_index):
        return self.b(self.act(self.a(x, edge_index)), edge_index)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("name")
    ap.add_argument("opset", type=int)
    ap.add_argument("out")
    ap.add_argument("--shape", help="image models: the input shape, e.g. 1x3x24x24")
    ap.add_argument("--graph", nargs=3, type=int, metavar=("NODES", "FEATURES", "EDGES"))
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.name.startswith("mtcnn_"):
        model, outputs = mtcnn(args.name)
        shape = [int(v) for v in args.shape.split("x")]
        inputs, names = (torch.rand(*shape) * 2 - 1,), ["input"]
    else:
        nodes, features, edges = args.graph
        model, outputs = TwoLayers(args.name, features).eval(), ["out"]
        inputs, names = (torch.randn(nodes, features), torch.randint(0, nodes, (2, edges))), ["x", "edge_index"]
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, inputs, args.out, dynamo=False, opset_version=args.opset, input_names=names,
                          output_names=outputs, do_constant_folding=True)


if __name__ == "__main__":
    main()
