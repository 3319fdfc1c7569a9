"""debug's weight range flags: uneven channel ranges are reported, dead channels do not blow the ratio up."""

from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from hbtool.debug.analysis.ranges import weight_flags
from hbtool.ir.onnx_import import import_onnx
from tests.helpers import small_conv_model


def _graph_with_channel_scales(scales: list[float]):
    model = small_conv_model(channels=len(scales))
    w = next(i for i in model.graph.initializer if len(i.dims) == 4)
    arr = np.random.default_rng(0).normal(size=tuple(w.dims)).astype(np.float32)
    arr *= np.asarray(scales, np.float32).reshape(-1, 1, 1, 1)
    w.CopyFrom(numpy_helper.from_array(arr, w.name))
    graph = import_onnx(model)
    for node in graph.nodes:
        node.meta["on"] = "BPU"
    return graph


def _uneven(flags):
    return [f for f in flags if "uneven channel ranges" in f.reason]


def test_a_dead_channel_is_not_an_uneven_range():
    flags = _uneven(weight_flags(_graph_with_channel_scales([1, 1.2, 0.8, 1, 1e-38, 1, 0.9, 1.1])))
    assert flags == []


def test_a_channel_a_thousand_times_smaller_is_flagged_with_its_ratio():
    flags = _uneven(weight_flags(_graph_with_channel_scales([1, 1.2, 0.8, 1, 1e-3, 1, 0.9, 1.1])))
    assert len(flags) == 1 and 500 < flags[0].ratio < 5000
