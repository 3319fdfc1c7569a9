"""``hbtool perf`` on the standard models at batch 1, against the J5 figures of the seed article.

    .venv/bin/python -m benchmarks.perf_models [--models resnet50 efficientnet_lite4 swin_t deit_tiny]
        [--levels swin_t] [--json benchmarks/_out/perf_models.json] [--markdown benchmarks/_out/perf_models.md]

For every model it runs the quick path of ``hbtool perf --model M.onnx --fast`` (calibration on
random data, ``calibration_type: skip``), compiles at O3 and at O0 from the same calibrated model,
and costs both with the one parameter set of ``hbtool/march/bayes.yaml``. Models come from
``benchmarks/_models/`` (``<name>_op17.onnx``, else ``<name>_op17_dynamic.onnx`` with the input
shape fixed), exported with ``samples.export`` when missing (seeded random weights: speed does
not depend on them). ``--levels`` adds the cumulative pass-by-pass ablation for those models.
``--sensitivity`` re-costs the compiled programs with every assumed parameter halved and doubled
(the SRAM size by recompiling, since the compiler's memory plan depends on it) and prints how
FPS and Swin-T's O3/O0 ratio move.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from benchmarks.paths import MODELS, OUT
from benchmarks.tables import markdown_table, write_result
from hbtool.costmodel.hardware import hardware_for
from hbtool.perf.levels import compare_levels
from hbtool.perf.run import calibrate_to, fast_config
from hbtool.costmodel.schedule import estimate_program

# assumed parameters the sensitivity study varies (Hardware attribute, label); each halved and doubled
ASSUMED = [
    ("clock_hz", "clock (MACs/cycle rescaled: same 128 TOPS)"), ("array_c_out", "array c_out (reduce rescaled)"),
    ("tensor_int16_rate", "tensor int16 rate"), ("vector_lanes", "vector lanes"), ("vector_int16_rate", "vector int16 rate"),
    ("cpe", "vector cycles/element (all classes)"), ("dm_bytes_per_cycle", "data-movement bytes/cycle"),
    ("sram_bytes_per_cycle", "SRAM bytes/cycle"), ("sram_access_bytes", "SRAM access granule"),
    ("ddr_bytes_per_s", "DDR peak bandwidth"), ("ddr_efficiency", "DDR efficiency"), ("ddr_burst_bytes", "DDR burst"),
    ("per_op_cycles", "dispatch overhead per op"), ("per_frame_us", "runtime per frame"), ("cpu", "A55 speed (all CPU terms)"),
    ("sram_bytes", "SRAM size (recompiled)"),
]

SHAPES = {"resnet50": (1, 3, 224, 224), "efficientnet_lite4": (1, 3, 300, 300), "swin_t": (1, 3, 224, 224),
          "deit_tiny": (1, 3, 224, 224)}
# J5 figures of the seed article (000_*.txt), FPS with both cores; the acceptance band
SEED = {"resnet50": (">600", (500, 900)), "efficientnet_lite4": (">1000", (800, 1500)), "swin_t": ("143", (100, 190)),
        "deit_tiny": ("-", None)}


def model_file(name: str) -> tuple[Path, dict[str, tuple[int, ...]]]:
    models = MODELS
    static = models / f"{name}_op17.onnx"
    if static.exists():
        return static, {}
    dynamic = models / f"{name}_op17_dynamic.onnx"
    if dynamic.exists():
        return dynamic, {"input": SHAPES[name]}
    from samples.export import export_model

    print(f"exporting {name} to {static}", flush=True)
    export_model(name, static)
    return static, {}


def scaled(hw, what: str, f: float):
    """``hw`` with one assumed parameter scaled by ``f`` (dependent parameters kept consistent)."""
    from dataclasses import replace

    if what == "clock_hz":
        return replace(hw, clock_hz=hw.clock_hz * f, macs_per_cycle=int(hw.macs_per_cycle / f), array_c_out=int(hw.array_c_out / f))
    if what == "array_c_out":
        return replace(hw, array_c_out=int(hw.array_c_out * f), array_reduce=int(hw.array_reduce / f))
    if what == "cpe":
        return replace(hw, **{k: getattr(hw, k) * f for k in ("cpe_elementwise", "cpe_lut", "cpe_lut_int16", "cpe_layernorm",
                                                               "cpe_softmax", "cpe_pool")})
    if what == "cpu":
        return replace(hw, cpu_gflops=hw.cpu_gflops * f, cpu_clock_hz=hw.cpu_clock_hz * f, cpu_per_op_us=hw.cpu_per_op_us / f)
    if what in ("tensor_int16_rate", "vector_int16_rate", "ddr_efficiency"):
        return replace(hw, **{what: min(1.0, getattr(hw, what) * f)})
    value = getattr(hw, what) * f
    return replace(hw, **{what: type(getattr(hw, what))(value)})


def sensitivity(compiled: dict[str, dict], cfgs: dict) -> list[dict]:
    """FPS of every model (and Swin-T's O3/O0) with each assumed parameter x0.5 and x2."""
    from hbtool.march.description import load_march

    base_hw = hardware_for("bayes")
    out = []

    def fps_of(hw, name, level="O3"):
        c = compiled[name][level]
        return estimate_program(c.program, c.header["tensors"], hw).fps

    base = {n: fps_of(base_hw, n) for n in compiled}
    ratio0 = {n: fps_of(base_hw, n) / fps_of(base_hw, n, "O0") for n in compiled if "O0" in compiled[n]}
    for what, label in ASSUMED:
        row = {"parameter": what, "label": label, "base": {n: round(v, 1) for n, v in base.items()},
               "base_ratio": {n: round(v, 2) for n, v in ratio0.items()}}
        for f in (0.5, 2.0):
            if what == "sram_bytes":
                march = load_march("bayes")
                rec = march.raw["memory"]["sram_bytes_per_core"]
                old = rec["value"]
                rec["value"] = int(old * f)
                try:
                    from hbtool.compiler.compile import compile_model

                    fps, rat = {}, {}
                    for n in compiled:
                        cfg, cal = cfgs[n]
                        levels = {lv: compile_model(cfg, optimize_level=lv, calibrated=cal) for lv in compiled[n]}
                        hw = scaled(base_hw, "sram_bytes", f)
                        fps[n] = estimate_program(levels["O3"].program, levels["O3"].header["tensors"], hw).fps
                        if "O0" in levels:
                            rat[n] = fps[n] / estimate_program(levels["O0"].program, levels["O0"].header["tensors"], hw).fps
                finally:
                    rec["value"] = old
            else:
                hw = scaled(base_hw, what, f)
                fps = {n: fps_of(hw, n) for n in compiled}
                rat = {n: fps[n] / fps_of(hw, n, "O0") for n in ratio0}
            row[f"x{f:g}"] = {"fps": {n: round(v, 1) for n, v in fps.items()}, "o3_over_o0": {n: round(v, 2) for n, v in rat.items()}}
        out.append(row)
        print(f"  {label}: " + "; ".join(f"x{f:g}: " + ", ".join(f"{n} {row[f'x{f:g}']['fps'][n]:.0f}" for n in compiled)
                                        + (f", swin_t O3/O0 {row[f'x{f:g}']['o3_over_o0'].get('swin_t', 0):.1f}" if "swin_t" in ratio0 else "")
                                        for f in (0.5, 2.0)), flush=True)
    return out


def sensitivity_markdown(rows: list[dict]) -> str:
    if not rows:
        return ""
    names = list(rows[0]["base"])
    base = [["(as in bayes.yaml)", *(f"{rows[0]['base'][n]:.0f}" for n in names), f"{rows[0]['base_ratio'].get('swin_t', float('nan')):.1f}"]]
    cells = [[r["label"], *(f"{r['x0.5']['fps'][n]:.0f} / {r['x2']['fps'][n]:.0f}" for n in names),
              f"{r['x0.5']['o3_over_o0'].get('swin_t', float('nan')):.1f} / {r['x2']['o3_over_o0'].get('swin_t', float('nan')):.1f}"]
             for r in rows]
    return ("\nSensitivity: FPS (2 cores) with one assumed parameter halved / doubled, everything else as in bayes.yaml\n\n"
            + markdown_table(("parameter", *(f"{n} FPS" for n in names), "swin_t O3/O0"), base + cells))


def measure(name: str, levels: bool, keep: dict | None = None) -> dict:
    path, shapes = model_file(name)
    work = Path(tempfile.mkdtemp(prefix=f"perf_{name}_"))
    try:
        t0 = time.perf_counter()
        cfg = fast_config(path, shapes, "bayes", work)
        calibrated = calibrate_to(cfg, work / f"{cfg.model.output_model_file_prefix}_calibrated_model.onnx")
        t_cal = time.perf_counter() - t0
        from hbtool.compiler.compile import compile_model

        c3 = compile_model(cfg, optimize_level="O3", calibrated=calibrated)
        c0 = compile_model(cfg, optimize_level="O0", calibrated=calibrated)
        o3 = estimate_program(c3.program, c3.header["tensors"], hardware_for("bayes"), model=name, optimize_level="O3")
        o0 = estimate_program(c0.program, c0.header["tensors"], hardware_for("bayes"), model=name, optimize_level="O0")
        if keep is not None:
            keep[name] = ({"O3": c3, "O0": c0}, (cfg, calibrated))
        row = {
            "model": name, "input": "x".join(map(str, SHAPES[name])),
            "fps_1core": round(o3.fps_1core, 1), "fps": round(o3.fps, 1), "latency_ms": round(o3.latency_ms, 3),
            "fps_bound": o3.fps_bound, "fps_limits": {k: round(v, 1) for k, v in o3.fps_limits.items()},
            "bound_by": o3.bound_by, "bound_share": {k: round(v, 4) for k, v in o3.bound_share.items()},
            "time_share": {k: round(v, 4) for k, v in o3.time_share.items()},
            "tensor_vector_ratio": None if o3.tensor_vector_ratio is None else round(o3.tensor_vector_ratio, 1),
            "gmacs": round(o3.macs / 1e9, 3), "ddr_mb_per_frame": round(o3.ddr_bytes_per_frame / 1e6, 2),
            "utilisation": round(o3.utilisation, 4), "padding_efficiency": round(o3.padding_efficiency, 3),
            "o0_fps": round(o0.fps, 2), "o0_latency_ms": round(o0.latency_ms, 2), "o3_over_o0": round(o3.fps / o0.fps, 2),
            "o0_ddr_mb_per_frame": round(o0.ddr_bytes_per_frame / 1e6, 1),
            "seed_fps": SEED[name][0], "band": SEED[name][1], "calibrate_s": round(t_cal, 1),
        }
        if levels:
            rows, _ = compare_levels(cfg, calibrated, 1)
            row["levels"] = rows
        return row
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)


def markdown(rows: list[dict]) -> str:
    share = lambda r, k: f"{100 * r['bound_share'].get(k, 0):.0f}"  # noqa: E731
    header = ("model (input)", "FPS 1 core", "FPS 2 cores", "J5 (seed)", "latency ms", "FPS bound by",
              "latency bound by (DM/DDR/vector/tensor/overhead %)", "tensor:vector", "GMAC", "DDR MB/frame", "utilisation",
              "O0 FPS", "O3/O0")
    cells = []
    for r in rows:
        ratio = f"{r['tensor_vector_ratio']:.0f}:1" if r["tensor_vector_ratio"] else "-"
        cells.append([f"{r['model']} ({r['input']})", f"{r['fps_1core']:.0f}", f"{r['fps']:.0f}", r["seed_fps"], f"{r['latency_ms']:.2f}",
                      r["fps_bound"], f"{r['bound_by']} ({share(r, 'data_movement')}/{share(r, 'ddr')}/{share(r, 'vector')}/"
                      f"{share(r, 'tensor')}/{share(r, 'overhead')})", ratio, f"{r['gmacs']:.2f}", f"{r['ddr_mb_per_frame']:.1f}",
                      f"{100 * r['utilisation']:.1f} %", f"{r['o0_fps']:.1f}", f"{r['o3_over_o0']:.1f}x"])
    text = markdown_table(header, cells)
    for r in rows:
        if r.get("levels"):
            text += f"\n{r['model']}: cumulative ablation (O0, then each pass switched on in optimize_level order)\n\n"
            text += markdown_table(
                ("step", "level", "pass switched on", "latency ms", "FPS", "x previous", "x O0", "DDR MB/frame", "bound by"),
                [[k, lv["level"], lv["pass"] or "(none: O0)", f"{lv['latency_ms']:.2f}", f"{lv['fps']:.1f}", f"{lv['speedup_previous']:.2f}",
                  f"{lv['speedup_o0']:.2f}", f"{lv['ddr_bytes_per_frame'] / 1e6:.1f}", lv["bound_by"]] for k, lv in enumerate(r["levels"])])
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--levels", nargs="*", default=["swin_t"], help="models that also get the pass-by-pass ablation")
    ap.add_argument("--json", type=Path, default=OUT / "perf_models.json")
    ap.add_argument("--markdown", type=Path, default=OUT / "perf_models.md")
    ap.add_argument("--sensitivity", action="store_true", help="vary every assumed parameter x0.5 and x2")
    args = ap.parse_args(argv)
    rows = []
    keep: dict | None = {} if args.sensitivity else None
    for name in args.models:
        t0 = time.perf_counter()
        row = measure(name, name in (args.levels or []), keep)
        row["seconds"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        band = row["band"]
        ok = "" if band is None else (" (in the band)" if band[0] <= row["fps"] <= band[1] else f" (OUTSIDE {band[0]}-{band[1]})")
        print(f"{name}: {row['fps']:.1f} FPS{ok}, 1 core {row['fps_1core']:.1f}, latency {row['latency_ms']:.2f} ms, "
              f"bound by {row['fps_bound']} / {row['bound_by']}, tensor:vector {row['tensor_vector_ratio']}, "
              f"O0 {row['o0_fps']:.1f} FPS (O3/O0 {row['o3_over_o0']:.1f}x) [{row['seconds']:.0f} s]", flush=True)
        write_result(args.json, json.dumps(rows, indent=1) + "\n")
        write_result(args.markdown, markdown(rows))
    text = markdown(rows)
    if keep is not None:
        print("sensitivity:", flush=True)
        sens = sensitivity({n: c for n, (c, _) in keep.items()}, {n: cc for n, (_, cc) in keep.items()})
        text += sensitivity_markdown(sens)
        write_result(args.json, json.dumps({"models": rows, "sensitivity": sens}, indent=1) + "\n")
        for _compiled, (cfg, _cal) in keep.values():
            shutil.rmtree(cfg.model.working_dir, ignore_errors=True)
    write_result(args.markdown, text)
    print()
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
