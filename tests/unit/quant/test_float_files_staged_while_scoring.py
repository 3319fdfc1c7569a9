"""The original and optimized float models' files are made while the candidates are scored.

Neither depends on the chosen candidate, so ``choose_method`` serializes and stages them while onnxruntime scores
(the main thread only waits there) instead of during the final evaluation, which keeps both cores busy. Checked
here: they are staged by then (temporary files, nothing at the targets), with the bytes ``write_outputs`` writes,
and the final result does not serialize or stage them again; without ``evaluate`` (``hbtool debug``'s tries)
nothing is made early.
"""

from __future__ import annotations

from pathlib import Path

from hbtool.ir.onnx_export import serialized_onnx, to_onnx
from hbtool.quant import calibrate as calib
from hbtool.quant.calibrate import output_files
from hbtool.utils.atomic import AtomicFileSet

from tests.unit.quant.test_candidate_scoring import _prepared


def _staged_bytes(staging: AtomicFileSet) -> dict[Path, bytes]:
    return {target: tmp.read_bytes() for tmp, target in staging._temps}


def test_float_files_are_staged_while_scoring(tmp_path, monkeypatch):
    with AtomicFileSet() as staging:
        run = _prepared(tmp_path, "tiny_cnn")
        run.staging, run.evaluate = staging, True
        files = output_files(run.cfg)
        method, candidates = run.choose_method()
        staged = _staged_bytes(staging)
        assert set(staged) == {files["original_float_model"], files["optimized_float_model"]}
        assert staged[files["original_float_model"]] == to_onnx(run.original, stage="original_float").SerializeToString()
        assert staged[files["optimized_float_model"]] == to_onnx(run.graph, stage="optimized_float").SerializeToString()
        assert not any(p.exists() for p in files.values())   # staged, not at the targets
        made = []
        monkeypatch.setattr(calib, "to_onnx", lambda graph, **kw: made.append(kw.get("stage")) or to_onnx(graph, **kw))
        monkeypatch.setattr(calib, "serialized_onnx", lambda graph, **kw: made.append(kw.get("stage")) or serialized_onnx(graph, **kw))
        result = run.final_result(method, candidates, evaluate=True)
        assert "original_float" not in made   # not serialized again
        assert [target for _, target in staging._temps] == [files[k] for k in
                                                            ("original_float_model", "optimized_float_model", "calibrated_model", "quantized_model")]
        assert _staged_bytes(staging)[files["original_float_model"]] == result.serialized["original_float_model"]


def test_nothing_is_made_early_without_the_evaluation(tmp_path):
    with AtomicFileSet() as staging:
        run = _prepared(tmp_path, "tiny_cnn")
        run.staging = staging   # run.evaluate stays False, as for run_calibration(evaluate=False)
        run.choose_method()
        assert not staging._temps and not run.serialized
