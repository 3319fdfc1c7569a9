"""debug_parameters.metric: a user hook module:function, found beside the YAML; bad ones are one-line errors."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from hbtool.cli import main
from hbtool.config import load_config
from hbtool.debug.metrics_hook import resolve_metric
from hbtool.errors import InputError
from tests.helpers import small_conv_model
from tests.debug_models import write_config

import onnx

HOOK = '''
import numpy as np

def agreement(quantized, float_):
    q, f = quantized["y"], float_["y"]
    return float(np.mean(np.argmax(q, axis=1) == np.argmax(f, axis=1)))
'''


@pytest.fixture
def conv_cfg(tmp_path):
    onnx.save(small_conv_model(), tmp_path / "m.onnx")
    (tmp_path / "my_metrics.py").write_text(HOOK)
    return tmp_path


@pytest.mark.parametrize("spec, needle", [
    ("no_such_module:f", "not found beside the YAML"),
    ("my_metrics:missing", "has no function 'missing'"),
    ("my_metrics:", "not of the form module:function"),
    ("cosin", "did you mean 'cosine'"),
])
def test_bad_hook_is_one_line_input_error(conv_cfg, spec, needle):
    cfg_path = write_config(conv_cfg, conv_cfg / "m.onnx", "1x3x16x16", debug={"metric": spec}, samples=4)
    res = CliRunner().invoke(main, ["debug", "-c", str(cfg_path), "--output-dir", str(conv_cfg / "out")])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in res.output, res.output
    with pytest.raises(InputError):
        resolve_metric(spec, conv_cfg)


def test_hook_drives_the_ranking(conv_cfg):
    cfg_path = write_config(conv_cfg, conv_cfg / "m.onnx", "1x3x16x16", debug={"metric": "my_metrics:agreement"}, samples=4)
    res = CliRunner().invoke(main, ["debug", "-c", str(cfg_path), "--output-dir", str(conv_cfg / "out"), "--samples", "4"])
    assert res.exit_code == 0, res.output
    import json

    data = json.loads((conv_cfg / "out" / "debug.json").read_text())
    assert data["metric"] == "my_metrics:agreement" and data["metric_is_hook"]
    assert data["reference"]["float"] == 1.0            # float vs float agrees everywhere
    assert {s["name"] for s in data["sensitivity"]} == {"conv", "relu"}
