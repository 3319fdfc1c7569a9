"""``hbtool perf --fast`` keeps its peak memory far below the model's activations (issue 33, slow).

A generated mid-size model (40 1x1 convs with ReLU at 64 x 320 x 320: 2.1 GB of observed float
activations per sample, 26 MB each) runs through the real CLI in a fresh parent process, whose
``RUSAGE_CHILDREN`` peak is then hbtool's alone. Holding every observed tensor of a sample at once
(the one-session statistics pass, or the error evaluation of the quick path) needs more than the
whole 2.1 GB; in pieces the pass holds one piece's share (``PIECE_BUDGET_BYTES``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[3]
LAYERS, CH, SIDE = 40, 64, 320
BOUND_BYTES = 1.0e9

_PEAK_OF_CHILD = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL); "
                  "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def _mid_model(path: Path) -> float:
    """The model; returns the bytes of its conv and ReLU outputs per sample."""
    rng = np.random.default_rng(0)
    nodes, inits, prev, cin = [], [], "images", 3
    for k in range(LAYERS):
        inits += [numpy_helper.from_array((rng.normal(0, 1, (CH, cin, 1, 1)) / np.sqrt(cin)).astype(np.float32), f"w{k}"),
                  numpy_helper.from_array(rng.normal(0, 0.1, CH).astype(np.float32), f"b{k}")]
        nodes += [helper.make_node("Conv", [prev, f"w{k}", f"b{k}"], [f"c{k}"]), helper.make_node("Relu", [f"c{k}"], [f"r{k}"])]
        prev, cin = f"r{k}", CH
    graph = helper.make_graph(nodes, "mid", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, SIDE, SIDE])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, CH, SIDE, SIDE])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, path)
    return 2 * LAYERS * CH * SIDE * SIDE * 4.0


@pytest.mark.slow  # about a minute: calibration, compile and cost of a 2 GB-activation model
def test_perf_fast_peak_stays_far_below_the_activations(tmp_path):
    activations = _mid_model(tmp_path / "mid.onnx")
    out = tmp_path / "perf.json"
    cmd = [sys.executable, "-c", _PEAK_OF_CHILD, sys.executable, "-m", "hbtool.cli", "perf", "--model", str(tmp_path / "mid.onnx"),
           "--fast", "--march", "bayes-e", "--input-type-rt", "nv12", "--json", str(out)]
    rc, peak_kib = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert rc == "0"
    peak = int(peak_kib) * 1024
    assert json.loads(out.read_text())["latency_ms"] > 0
    assert activations > 2e9
    assert peak < BOUND_BYTES, f"perf --fast peaked at {peak / 1e9:.2f} GB (activations {activations / 1e9:.1f} GB per sample)"
