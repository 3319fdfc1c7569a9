"""A trained corpus model quantized by onnxruntime's quantizer, deployed by hbtool: does it keep what was fixed?

    python benchmarks/zoo/prequantized.py [--models ppocrv6_tiny_rec] [--forms qdq-s8-pc qdq-u8-pt qop-u8-pc]
                                          [--cal-samples 32] [--eval-samples 100] [--calibration-type load]

For each model and form, the float model is quantized with ``onnxruntime.quantization.quantize_static``
on ``--cal-samples`` rendered calibration samples (the same ones ``trained.py`` calibrates hbtool with):

* ``qdq-s8-pc``: QDQ, int8 symmetric activations (``ActivationSymmetric``), per-channel int8 weights;
* ``qdq-u8-pt``: QDQ with onnxruntime's defaults (uint8 activations with zero points, per-tensor weights);
* ``qop-u8-pc``: QOperator (QLinearConv ...), uint8 activations, per-channel weights.

Then two rows per form on ``--eval-samples`` held-out samples, scored as ``trained.py`` scores:

* ``onnxruntime int8``: the quantized model itself in onnxruntime, against the float model;
* ``hbtool deployed``: that model through ``hbtool calibrate`` (``--calibration-type``, default ``load``: the
  model's own scales) and ``compile``, against the quantized model in onnxruntime (its "float" column is the
  onnxruntime int8 model), with ``hbtool simulate`` checked to equal hbtool's quantized ONNX bit for bit.

Nothing is downloaded: the float models are the corpus's (``benchmarks/zoo/export.py``). Output in ``--out``
(default ``benchmarks/_out/prequantized``): ``prequantized.json`` and the work folders.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import onnx
import onnx.version_converter

from benchmarks.zoo import run as zoo_run
from benchmarks.zoo import trained
from benchmarks.zoo.corpus import OUT_DIR, ModelSpec, select

FORMS = {
    "qdq-s8-pc": dict(fmt="QDQ", activation="QInt8", per_channel=True, symmetric=True),
    "qdq-u8-pt": dict(fmt="QDQ", activation="QUInt8", per_channel=False, symmetric=False),
    "qop-u8-pc": dict(fmt="QOperator", activation="QUInt8", per_channel=True, symmetric=False),
}


@dataclass(frozen=True)
class QuantizedSpec(ModelSpec):
    """A corpus model's spec whose ONNX file is its quantized form (everything else, data and metric, the same)."""

    path: Path | None = None

    @property
    def onnx_path(self) -> Path:  # type: ignore[override]
        return self.path


def quantize(spec: ModelSpec, form: str, cal_feeds: list[dict], out: Path) -> Path:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    f = FORMS[form]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(cal_feeds)

        def get_next(self):
            return next(self.it, None)

    out.mkdir(parents=True, exist_ok=True)
    dst = out / f"{spec.name}.onnx"
    source = spec.onnx_path
    model = onnx.load(str(source))
    if next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) < 13:
        # per-axis DequantizeLinear needs opset 13; onnxruntime's quantizer writes it into an opset-11 model regardless
        source = out / "float_opset13.onnx"
        onnx.save(onnx.version_converter.convert_version(model, 13), str(source))
    quantize_static(str(source), str(dst), Reader(),
                    quant_format=QuantFormat.QDQ if f["fmt"] == "QDQ" else QuantFormat.QOperator,
                    per_channel=f["per_channel"], weight_type=QuantType.QInt8, activation_type=getattr(QuantType, f["activation"]),
                    extra_options={"ActivationSymmetric": True} if f["symmetric"] else {})
    dictionary = spec.onnx_path.with_suffix(".dict.txt")
    if dictionary.exists():   # recognisers read their charset beside the model
        shutil.copy(dictionary, dst.with_suffix(".dict.txt"))
    return dst


class _Quiet:
    def update(self, *a, **k):
        pass

    def advance(self, *a, **k):
        pass


def main() -> None:
    from data import float_samples, samples

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["ppocrv6_tiny_rec"])
    ap.add_argument("--forms", nargs="+", default=list(FORMS), choices=list(FORMS))
    ap.add_argument("--cal-samples", type=int, default=32)
    ap.add_argument("--eval-samples", type=int, default=100)
    ap.add_argument("--check-samples", type=int, default=4)
    ap.add_argument("--calibration-type", default="load")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--out", type=Path, default=OUT_DIR.parent / "prequantized")
    args = ap.parse_args()
    args.out = args.out.resolve()
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    rows = []
    for spec in select(args.models):
        cal = samples(spec, args.cal_samples, 0)
        held = samples(spec, args.eval_samples, zoo_run.HELD_OUT_OFFSET)
        names, float_runs = zoo_run._float_outputs(spec, float_samples(spec, held))
        ref = {n: [r[i] for r in float_runs] for i, n in enumerate(names)}
        for form in args.forms:
            qdir = args.out / f"{spec.name}__{form}"
            shutil.rmtree(qdir, ignore_errors=True)
            path = quantize(spec, form, float_samples(spec, cal), qdir / "model")
            qspec = QuantizedSpec(**{k: getattr(spec, k) for k in spec.__dataclass_fields__}, path=path)
            _, int8_runs = zoo_run._float_outputs(qspec, float_samples(spec, held))
            int8 = {n: [r[i] for r in int8_runs] for i, n in enumerate(names)}
            row_ort = {"model": spec.name, "form": form, "row": "onnxruntime int8 vs float", **trained.score(spec, int8, ref, held)}
            run_args = SimpleNamespace(out=qdir, timeout=args.timeout, eval_samples=args.eval_samples, cal_samples=args.cal_samples,
                                       held_out_offset=zoo_run.HELD_OUT_OFFSET, calibration_type=args.calibration_type, set=None,
                                       check_samples=args.check_samples)
            row_hb = {"form": form, "row": f"hbtool deployed ({args.calibration_type}) vs onnxruntime int8",
                      **trained.run_model(qspec, run_args, _Quiet(), None)}
            log = qdir / spec.name / "model_output" / "hb_calibrate.log"
            if log.exists():
                row_hb["log"] = [ln for ln in log.read_text().splitlines() if ln.startswith(("already-quantized", "warning", "note"))]
            rows += [row_ort, row_hb]
            for r in (row_ort, row_hb):
                print(f"{spec.name} {form:10s} {r['row']:45s} {r.get('metric', r.get('status', ''))}: "
                      f"ref {r.get('float_metric', float('nan')):.4f} got {r.get('metric_value', float('nan')):.4f} "
                      f"agreement {r.get('agreement', float('nan')):.3f} cosine {r.get('cosine', float('nan'))} "
                      f"exact={r.get('simulate_vs_quantized_onnx', {}).get('equal')}", flush=True)
            for line in row_hb.get("log", []):
                print("   ", line[:400], flush=True)
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "prequantized.json").write_text(json.dumps({"rows": rows}, indent=1, default=float) + "\n")


if __name__ == "__main__":
    main()
