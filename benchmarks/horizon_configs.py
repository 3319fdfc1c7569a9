"""Real hb_mapper configs, run unchanged: the RDK model zoo's YAMLs through makertbin and simulate.

    python -m benchmarks.horizon_configs --out /tmp/hz_out [--configs A.yaml B.yaml] [--samples 4]

For every config in tests/data/horizon_configs/ (copied from the zoo, see the NOTICE there):

1. build a model of the same architecture (benchmarks/horizon_models.py: a narrow torch build
   with the reference module names, or the corpus' real export with its input fixed);
2. rewrite exactly three keys of the YAML text (``onnx_model``, ``cal_data_dir``,
   ``working_dir``), every other line as published;
3. write the calibration data in the config's own format: ``.rgbchw`` raw float32 dumps
   (what the zoo's preprocessing scripts write for ``cal_data_type: float32``), or JPEG
   images of another size when the config has ``preprocess_on: True``;
4. ``hbtool makertbin -c`` (checker -> calibrate -> compile) in a subprocess, then run the
   artifact's program on one sample and compare it with the quantized ONNX (bit for bit) and
   with the float model (cosine).

Prints one table; a config that stops shows the one-line error it stopped with.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.paths import ROOT
from benchmarks.runner import run_stage
from benchmarks.tables import write_result

CONFIGS = ROOT / "tests" / "data" / "horizon_configs"

PATH_KEYS = ("onnx_model", "cal_data_dir", "working_dir")


def rewrite_paths(text: str, paths: dict[str, str]) -> str:
    """The config text with only the three path keys' values replaced (first uncommented occurrence)."""
    done = set()
    out = []
    for line in text.splitlines(keepends=True):
        m = re.match(r"^(\s*)(onnx_model|cal_data_dir|working_dir)(\s*:\s*)(.*?)(\r?\n)?$", line)
        if m and m.group(2) not in done:
            done.add(m.group(2))
            line = f"{m.group(1)}{m.group(2)}{m.group(3)}'{paths[m.group(2)]}'{m.group(5) or ''}"
        out.append(line)
    missing = [k for k in PATH_KEYS if k not in done]
    if missing:
        raise ValueError(f"config has no {missing}")
    return "".join(out)


def write_calibration(folder: Path, cfg_text: str, shape: tuple[int, ...], n: int) -> None:
    import yaml
    from PIL import Image

    from benchmarks.horizon_models import calibration_images

    folder.mkdir(parents=True, exist_ok=True)
    raw = yaml.safe_load(cfg_text)
    inp = raw.get("input_parameters") or {}
    cal = raw.get("calibration_parameters") or {}
    images = calibration_images(n, shape)
    if str(cal.get("preprocess_on", "")).lower() == "true":
        for k, img in enumerate(images):  # another size: preprocess_on resizes them
            Image.fromarray(img.transpose(1, 2, 0).astype(np.uint8)).resize((shape[3] + 53, shape[2] + 37)).save(folder / f"{k:03d}.jpg")
        return
    featuremap = str(inp.get("input_type_train", "")).strip("'\"") == "featuremap"
    for k, img in enumerate(images):
        data = ((img / 255.0 - 0.5) / 0.5 if featuremap else img).astype(np.float32)
        data.reshape(shape).tofile(folder / f"{k:03d}.rgbchw")


def _compare(case: Path, work: Path, prefix: str, sample: np.ndarray) -> dict:
    """Artifact vs quantized ONNX (bit for bit) and vs the float model with preprocessing (cosine)."""
    import onnxruntime as ort

    from hbtool.compiler.artifact import read_artifact
    from hbtool.simulator.executor import Executor

    art_path = next(p for p in (work / f"{prefix}.bin", work / f"{prefix}.hbm") if p.exists())
    art = read_artifact(art_path)
    ex = Executor(art, threads=2)
    (desc,) = art.header["inputs"]
    x = sample
    if desc.get("runtime"):  # input_type_rt nv12/yuv444/...: the chip's buffer, made as the camera does
        from hbtool.io.runtime_input import to_runtime
        from hbtool.simulator.runtime_files import spec_of

        x = to_runtime(sample, spec_of(desc))
    removed_in = desc.get("removed") or []
    for r in removed_in:  # remove_node_type cut the input Quantize: feed the codes
        if r["op_type"] == "Quantize":
            qmax = 2 ** (r.get("bits", 8) - 1) - 1
            x = np.clip(np.rint(x / np.float32(r["scale"][0])), -qmax - 1, qmax).astype(desc["dtype"])
    got = ex.run({desc["name"]: x.astype(desc["dtype"])})
    so = ort.SessionOptions()
    so.log_severity_level = 3
    q = ort.InferenceSession(str(work / f"{prefix}_quantized_model.onnx"), so, providers=["CPUExecutionProvider"])
    f = ort.InferenceSession(str(work / f"{prefix}_original_float_model.onnx"), so, providers=["CPUExecutionProvider"])
    feed = {q.get_inputs()[0].name: x if desc.get("runtime") else sample}
    qv, fv = q.run(None, feed), f.run(None, {f.get_inputs()[0].name: sample})
    exact, cosines = True, []
    for desc_o, qo, fo in zip(art.header["outputs"], qv, fv):
        v = np.asarray(got[desc_o["name"]])
        for r in desc_o.get("removed") or []:
            if r["op_type"] == "Dequantize":
                v = v.astype(np.float32) * np.float32(r["scale"][0])
            elif r["op_type"] == "Transpose":
                exact = None  # the removed permutation is the application's: no element-wise comparison
        if exact is not None:
            exact = exact and v.size == qo.size and np.array_equal(v.reshape(qo.shape).astype(np.float32), qo.astype(np.float32))
        if v.size == fo.size:
            a, b = v.reshape(-1).astype(np.float64), fo.reshape(-1).astype(np.float64)
            cosines.append(float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-30)))
    return {"exact": exact, "cosine": min(cosines) if cosines else None, "artifact": art_path.name,
            "input_dtype": desc["dtype"]}


def run_config(name: str, out: Path, samples: int, timeout: int) -> dict:
    from benchmarks.horizon_models import STANDINS, build

    case = out / Path(name).stem
    case.mkdir(parents=True, exist_ok=True)
    row: dict = {"config": name, "model": STANDINS[name][0]}
    t0 = time.perf_counter()
    text = (CONFIGS / name).read_text()
    import yaml

    raw = yaml.safe_load(text)
    row["march"] = raw["model_parameters"].get("march")
    row["rt"] = raw["input_parameters"].get("input_type_rt")
    model, _, shape = build(name, case)
    cfg_text = rewrite_paths(text, {"onnx_model": str(model), "cal_data_dir": str(case / "cal"), "working_dir": str(case / "work")})
    write_calibration(case / "cal", cfg_text, shape, samples)
    cfg_path = case / name
    cfg_path.write_text(cfg_text)
    stage = run_stage("makertbin", ["-c", str(cfg_path)], ROOT, timeout, verbose=False, log_dir=case)
    row["makertbin_rc"] = stage["rc"]
    if stage["rc"] == "timeout":
        row["result"] = f"timeout after {timeout} s"
    elif stage["rc"] != 0:
        row["result"] = (stage["error"] or "?")[:160]
    else:
        prefix = raw["model_parameters"]["output_model_file_prefix"]
        from benchmarks.horizon_models import calibration_images

        sample = calibration_images(1, shape, seed=99)
        if str(raw["input_parameters"].get("input_type_train")) == "featuremap":
            sample = (sample / 255.0 - 0.5) / 0.5
        try:
            row.update(_compare(case, case / "work", prefix, sample.astype(np.float32)))
            row["result"] = "ok"
        except Exception as exc:  # report, do not stop the table
            row["result"] = f"simulate: {type(exc).__name__}: {str(exc)[:120]}"
    row["seconds"] = round(time.perf_counter() - t0, 1)
    return row


def print_table(rows: list[dict]) -> None:
    head = f"{'config':46} {'stand-in':38} {'march':10} {'rt':10} {'sim==qonnx':10} {'cos(float)':10} {'s':>6}  result"
    print(head)
    print("-" * len(head))
    for r in rows:
        ex = {True: "exact", False: "DIFF", None: "n/a"}.get(r.get("exact"), "-") if r.get("result") == "ok" else "-"
        cos = f"{r['cosine']:.4f}" if r.get("cosine") is not None else "-"
        print(f"{r['config']:46} {r['model'][:38]:38} {str(r.get('march')):10} {str(r.get('rt')):10} {ex:10} {cos:10} {r['seconds']:6.1f}  {r['result']}")
    ok = sum(r["result"] == "ok" for r in rows)
    print(f"\n{ok} of {len(rows)} configs end to end ({100 * ok / max(len(rows), 1):.0f}%)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--configs", nargs="*", default=None, help="config file names (default: all)")
    ap.add_argument("--samples", type=int, default=4, help="calibration samples written per config")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per config")
    args = ap.parse_args()
    names = args.configs or sorted(p.name for p in CONFIGS.glob("*.yaml"))
    rows = []
    for name in names:
        rows.append(run_config(name, args.out, args.samples, args.timeout))
        print(f"{name}: {rows[-1]['result']} ({rows[-1]['seconds']} s)", file=sys.stderr, flush=True)
    print_table(rows)
    write_result(args.out / "horizon_configs.json", json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
