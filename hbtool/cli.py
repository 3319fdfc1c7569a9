"""The ``hbtool`` command line: one click group; each subcommand parses its arguments, calls
:mod:`hbtool.api` (which prints nothing) and prints the result.

Exit codes: 0 success, 1 the model cannot be deployed, 2 bad usage or bad input, 3 an internal
error (a bug: please report it), 4 a gate failed (gate_parameters, verify, diff; docs/ci.md). Errors are one line on stderr; ``--verbose`` adds the traceback.
"""

from __future__ import annotations

import logging
import sys
import traceback
from pathlib import Path
from typing import Sequence

import click

from hbtool import __version__
from hbtool.errors import HbError, InputError
from hbtool.utils.process_exit import freeze_objects_at_exit

EXIT_INTERNAL = 3


def _usage_exit(exc: click.UsageError, where: str = "hbtool"):
    """A click usage error (missing option, bad flag value, unknown command) as one line, exit 2."""
    where = exc.ctx.command_path if exc.ctx is not None else where
    click.echo(f"hbtool: error: {exc.format_message().strip().rstrip('.')}; fix: see '{where} --help'", err=True)
    raise click.exceptions.Exit(exc.exit_code)


_HELP_ON_NO_ARGS = getattr(click.exceptions, "NoArgsIsHelpError", ())


class HbGroup(click.Group):
    """Turns every failure into one line and an exit code a CI job can act on."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except _HELP_ON_NO_ARGS:
            raise
        except click.UsageError as exc:
            _usage_exit(exc)

    def invoke(self, ctx: click.Context):
        verbose = bool(ctx.params.get("verbose"))  # hbtool -v ...; not sys.argv, which is pytest's under CliRunner
        try:
            return super().invoke(ctx)
        except HbError as exc:
            if verbose:
                traceback.print_exc()
            for line in exc.stderr_lines():
                click.echo(line, err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("hbtool: error: interrupted (Ctrl-C); no half-written file was kept; fix: run the command again", err=True)
            ctx.exit(2)
        except _HELP_ON_NO_ARGS:
            raise
        except click.UsageError as exc:
            _usage_exit(exc, " ".join(p for p in (ctx.command_path, ctx.invoked_subcommand) if p))
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except Exception as exc:  # a bug in hbtool: still one line, unless --verbose
            if verbose:
                traceback.print_exc()
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            click.echo(
                f"hbtool: internal error: {type(exc).__name__}: {first[:300]}; fix: run again with --verbose and report it",
                err=True,
            )
            ctx.exit(EXIT_INTERNAL)


@click.group(cls=HbGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hbtool")
@click.option("-v", "--verbose", is_flag=True, help="Show debug logs and tracebacks.")
def main(verbose: bool) -> None:
    """Deploy float ONNX models to Horizon BPUs (Journey 5 / RDK Ultra `bayes`, RDK X5 `bayes-e`, RDK X3 `bernoulli2`): check, quantize, compile, simulate, estimate."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    freeze_objects_at_exit()


def parse_input_shapes(pairs: Sequence[tuple[str, str]]) -> dict[str, tuple[int, ...]]:
    from hbtool.config import parse_shape

    shapes: dict[str, tuple[int, ...]] = {}
    for name, text in pairs:
        try:
            shapes[name] = parse_shape(text)
        except ValueError:
            raise InputError(f"--input-shape {name} {text}: not a shape",
                             "write it like 1x3x224x224, or scalar for a rank-0 input") from None
    return shapes


@main.command()
@click.option("--model", "-m", "model", type=click.Path(path_type=Path), help="Float ONNX model (or give it in the YAML).")
@click.option("--march", default=None, help="Target architecture: bayes (J5), bayes-e (RDK X5), bernoulli2 (RDK X3). Default: the YAML's, else bayes.")
@click.option("--input-shape", "input_shapes", nargs=2, multiple=True, metavar="NAME SHAPE", help="Fix an input's shape, e.g. --input-shape input 1x3x224x224 (repeat per input).")
@click.option("-c", "--config", "config_path", type=click.Path(path_type=Path), help="Horizon-style YAML config (model, input shapes, node_info).")
@click.option("--output-dir", type=click.Path(path_type=Path), default=Path(".hb_check"), show_default=True, help="Where checker.json and the optimized float model go.")
@click.option("--max-rows", type=click.IntRange(min=0), default=None, help="Print at most this many BPU rows (CPU rows are always printed).")
def checker(model: Path | None, march: str | None, input_shapes, config_path: Path | None, output_dir: Path, max_rows: int | None) -> None:
    """Show which nodes run on the BPU and which fall back to the CPU, and why."""
    from hbtool import api
    from hbtool.checker.report import print_checker_report

    if config_path is not None:
        overrides = {"model_parameters": {"onnx_model": model.resolve()}} if model is not None else None
        target = api.load_config(config_path, overrides=overrides)
    elif model is None:
        raise InputError("no model given", "pass --model M.onnx or -c cfg.yaml with model_parameters.onnx_model")
    else:
        target = model
    result = api.check(target, march=march, input_shapes=parse_input_shapes(input_shapes), output_dir=output_dir)
    print_checker_report(result, max_rows=max_rows)
    result.require_deployable()


def _progress_callback(progress):
    """A (stage, done, total) callback drawing one rich progress bar per stage."""
    tasks: dict[str, int] = {}

    def update(stage: str, done: int, total: int) -> None:
        if stage not in tasks:
            tasks[stage] = progress.add_task(stage, total=total)
        progress.update(tasks[stage], completed=done, total=total)

    return update


@main.command()
@click.option("-c", "--config", "config_path", required=True, type=click.Path(path_type=Path), help="Horizon-style YAML config.")
@click.option("--model", "-m", "model", type=click.Path(path_type=Path), help="Override model_parameters.onnx_model.")
@click.option("--max-rows", type=click.IntRange(min=0), default=30, show_default=True, help="Node rows printed (least similar first); the log has all.")
def calibrate(config_path: Path, model: Path | None, max_rows: int) -> None:
    """Quantize the model (PTQ) and write the calibrated/quantized models, quant_info.json and the log."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from hbtool import api
    from hbtool.quant.report import print_report
    from hbtool.utils.allocator import keep_freed_memory

    keep_freed_memory()   # a quarter fewer page faults on a large model: arrays reused, not mapped again (hbtool.utils.allocator)
    overrides = {"model_parameters": {"onnx_model": model.resolve()}} if model is not None else None
    cfg = api.load_config(config_path, overrides=overrides)
    console = Console()  # progress bars only on a terminal: a pipe or CI log gets no stray lines
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True, console=console, disable=not console.is_terminal) as progress:
        result = api.calibrate(cfg, progress=_progress_callback(progress))
    print_report(result.details, max_rows=max_rows)
    for path in result.files.values():
        click.echo(f"wrote {path}")


def _progress_bar():
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True)


@main.command(name="compile")
@click.option("-c", "--config", "config_path", required=True, type=click.Path(path_type=Path), help="Horizon-style YAML config.")
@click.option("--optimize-level", type=click.Choice(["O0", "O1", "O2", "O3"]), default=None, help="Override compiler_parameters.optimize_level.")
@click.option("--disable-pass", "disabled", multiple=True, metavar="NAME", help="Turn one compiler pass off (repeatable); see docs/compile.md.")
@click.option("--output", "-o", "output", type=click.Path(path_type=Path), default=None, help="Artifact path (default: <working_dir>/<prefix>.bin).")
def compile_cmd(config_path: Path, optimize_level: str | None, disabled: tuple[str, ...], output: Path | None) -> None:
    """Compile the calibrated model into a BPU artifact (<prefix>.bin), calibrating first if needed."""
    from hbtool import api
    from hbtool.compiler.compile import calibrated_path, print_compile_summary

    cfg = api.load_config(config_path)
    if not api.is_calibrated(cfg):
        click.echo(f"{calibrated_path(cfg)} not found: calibrating first", err=True)
    with _progress_bar() as progress:
        result = api.compile(cfg, optimize_level=optimize_level, disabled_passes=disabled, output=output,
                             progress=_progress_callback(progress))
    if result.calibration is not None:
        for path in result.calibration.files.values():
            click.echo(f"wrote {path}")
    print_compile_summary(cfg, result.details)
    for path in result.files:
        click.echo(f"wrote {path}")


@main.command()
@click.option("-c", "--config", "config_path", required=True, type=click.Path(path_type=Path), help="Horizon-style YAML config (hb_mapper makertbin's).")
@click.option("--model-type", type=click.Choice(["onnx", "caffe"]), default="onnx", show_default=True, help="Accepted for hb_mapper command lines; only onnx is supported.")
@click.option("--max-rows", type=click.IntRange(min=0), default=30, show_default=True, help="Rows of the checker and calibration tables (CPU rows always shown).")
@click.option("--junit", type=click.Path(path_type=Path), default=None, help="With gate_parameters: also write the gates as JUnit XML here.")
def makertbin(config_path: Path, model_type: str, max_rows: int, junit: Path | None) -> None:
    """Checker, calibrate and compile in one run, like hb_mapper makertbin; then the gate_parameters gates (exit 4 on a failure)."""
    from hbtool import api
    from hbtool.cli_release import gate_after_build, require_gates_for_junit, stage_printer

    if model_type == "caffe":
        raise InputError("--model-type caffe: Caffe models are not supported", "convert the model to ONNX and pass --model-type onnx")
    cfg = api.load_config(config_path)
    require_gates_for_junit(cfg, junit)
    with _progress_bar() as progress:
        result = api.makertbin(cfg, progress=_progress_callback(progress), report=stage_printer(cfg, max_rows))
    for path in result.files:
        click.echo(f"wrote {path}")
    gate_after_build(cfg, result.compiled.path, junit)


@main.command()
@click.option("-c", "--config", "config_path", required=True, type=click.Path(path_type=Path), help="Horizon-style YAML config.")
@click.option("--resume", is_flag=True, help="Continue from <working_dir>/<prefix>_qat_checkpoint.pt.")
def qat(config_path: Path, resume: bool) -> None:
    """Quantization-aware training from the PTQ result; writes <prefix>_qat_model.onnx (see docs/qat.md)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from hbtool import api

    cfg = api.load_config(config_path)
    console = Console()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("loss {task.fields[loss]}"),
                  TimeElapsedColumn(), transient=True, console=console, disable=not console.is_terminal) as progress:
        task = progress.add_task("qat", total=None, loss="-")

        def update(step: int, total: int, loss: float) -> None:
            progress.update(task, completed=step, total=total, loss=f"{loss:.4g}")

        result = api.qat(cfg, progress=update, resume=resume)
    click.echo(f"qat: {result.steps} steps in {result.seconds:.1f} s on {result.world} process(es); "
               f"output cosine vs float {result.cosine_before:.6f} -> {result.cosine_after:.6f}; "
               f"last loss {result.losses[-1] if result.losses else float('nan'):.4g}")
    if result.path is not None:
        click.echo(f"wrote {result.path}")
    if result.cosine_after < result.cosine_before:
        # training wrote its model anyway (the user asked for it), but must not pass for an improvement
        click.echo(f"hbtool: warning: QAT lowered the validation output cosine ({result.cosine_before:.6f} -> "
                   f"{result.cosine_after:.6f}); the PTQ model, which hbtool compile -c uses unless given the QAT one, is better so far; "
                   "fix: lower qat_parameters.lr, or train longer or on more samples", err=True)


@main.command()
@click.argument("artifact", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the description as JSON.")
@click.option("--model-name", default=None, help="Describe this model of a packed artifact (without it: the list of its models).")
def info(artifact: Path, as_json: bool, model_name: str | None) -> None:
    """Describe an artifact: version, options, inputs/outputs, program, memory (like hb_model_info); a packed one: its models."""
    import json

    from hbtool import api
    from hbtool.compiler.info import print_packed, print_summary

    described = api.info(artifact, model_name)
    if as_json:
        click.echo(json.dumps(described.to_json(), indent=1, sort_keys=True))
    else:
        print_packed(described.summary) if described.packed else print_summary(described.summary)


@main.command()
@click.argument("artifact", type=click.Path(path_type=Path))
@click.option("--input", "-i", "inputs", multiple=True, required=True, metavar="NAME=PATH", help="Samples for an input: a .npy stacked on the first axis, or a folder of images/.npy (repeat per input).")
@click.option("--output-dir", "-o", type=click.Path(path_type=Path), default=None, help="Write <output name>.npy (dequantized float32, one row per sample) here.")
@click.option("--compare", type=click.Path(path_type=Path), default=None, help="ONNX model (float or quantized) to compare the outputs with.")
@click.option("--threads", type=click.IntRange(min=1), default=None, help="CPU threads for the emulator, CPU subgraphs and --compare (default: all cores).")
@click.option("--batch-size", "-b", type=int, default=16, show_default=True, help="Samples per pass through the integer program (results do not depend on it).")
@click.option("--resume", is_flag=True, help="Continue an interrupted run into the same --output-dir where it stopped.")
@click.option("--model-name", default=None, help="Run this model of a packed artifact (hbtool pack; hbtool info lists them).")
@click.option("--workers", type=int, default=1, show_default=True, help="Worker processes, each running ranges of samples (outputs do not depend on it).")
@click.option("--cluster", default=None, metavar="ADDRESS", help="Run the sample ranges on a Ray cluster: local, auto or ray://HOST:10001 (pip install 'hbtool[cluster]').")
def simulate(artifact: Path, inputs: tuple[str, ...], output_dir: Path | None, compare: Path | None, threads: int | None,
             batch_size: int, resume: bool, model_name: str | None, workers: int, cluster: str | None) -> None:
    """Run an artifact's integer program on inputs, bit-exactly, and compare with an ONNX model."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from hbtool import api
    from hbtool.simulator.inputs import parse_input_args
    from hbtool.simulator.report import print_simulation
    from hbtool.utils.allocator import keep_freed_memory
    from hbtool.utils.workers import check_workers

    # before any thread starts: a batch's two pass threads share the main heap, which keeps its freed blocks, instead
    # of each faulting its memory in again every pass (recogniser, batch 16: 29,000 page faults a batch -> 5)
    keep_freed_memory(one_arena=True)
    check_workers(workers)   # a bad count is said before the progress bar starts
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("[progress.data.speed]{task.fields[rate]}"),
                   TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), transient=True)
    with bar as progress:
        tasks: dict[str, int] = {}

        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = progress.add_task(stage, total=total, rate="")
            progress.update(tasks[stage], completed=done, total=total)
            speed = progress.tasks[tasks[stage]].speed
            progress.update(tasks[stage], rate=f"{speed:.1f} samples/s" if speed else "")

        try:
            result = api.simulate_report(artifact, parse_input_args(list(inputs)), output_dir=output_dir, compare=compare,
                                         progress=update, threads=threads, batch_size=batch_size, resume=resume, keep_outputs=False,
                                         model_name=model_name, workers=workers, cluster=cluster)
        except KeyboardInterrupt:
            if output_dir is None:
                raise
            raise InputError(f"interrupted (Ctrl-C); the finished batches are kept in {output_dir}/.partial",
                             "run the same command with --resume to continue where it stopped") from None
    print_simulation(result)
    for path in result.files:
        click.echo(f"wrote {path}")


@main.command()
@click.argument("artifact", type=click.Path(path_type=Path), required=False)
@click.option("-c", "--config", "config_path", type=click.Path(path_type=Path), help="Cost the config's calibrated model, compiled in memory.")
@click.option("--model", "-m", "model", type=click.Path(path_type=Path), help="Quick path: an ONNX model, calibrated on random data (needs --fast).")
@click.option("--fast", is_flag=True, help="Quick path (like makertbin --fast-perf): calibration_type skip, compile, cost.")
@click.option("--input-shape", "input_shapes", nargs=2, multiple=True, metavar="NAME SHAPE", help="Quick path: fix an input's shape, e.g. --input-shape input 1x3x224x224.")
@click.option("--march", default="bayes", show_default=True, help="Quick path: target architecture (bayes, bayes-e, bernoulli2).")
@click.option("--optimize-level", type=click.Choice(["O0", "O1", "O2", "O3"]), default=None, help="Compile at this level (quick path default O3; -c default: the config's).")
@click.option("--core-num", type=click.Choice(["1", "2"]), default=None, help="BPU cores per frame (default: the artifact's / config's core_num).")
@click.option("--output-dir", type=click.Path(path_type=Path), default=None, help="Write perf.html, perf_ops.png, perf_timeline.png and perf.json here.")
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None, help="Write the estimate as JSON to this file ('-': stdout).")
@click.option("--compare-levels", is_flag=True, help="Also compile at O0..O3, one pass at a time, and show what each optimization buys (quick path or -c).")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="Ops listed in the console table.")
@click.option("--input-type-rt", type=click.Choice(["featuremap", "nv12"]), default=None,
              help="Cost the inputs as this run-time type (nv12: the BPU converts the image, no CPU quantize; default: the artifact's).")
@click.option("--board", default=None,
              help="The board the march's BPU runs on (bayes: journey5, the default, or rdk-ultra at 96 TOPS; bayes-e: rdk-x5; bernoulli2: rdk-x3).")
@click.option("--model-name", default=None, help="Estimate this model of a packed artifact (hbtool pack).")
def perf(artifact: Path | None, config_path: Path | None, model: Path | None, fast: bool, input_shapes, march: str,
         optimize_level: str | None, core_num: str | None, output_dir: Path | None, json_path: Path | None,
         compare_levels: bool, top: int, input_type_rt: str | None, board: str | None, model_name: str | None) -> None:
    """Estimate latency, FPS, DDR traffic and what binds them, from the march's hardware description."""
    import json

    from hbtool import api
    from hbtool.perf.report import print_levels, print_report

    given = [name for name, v in (("ARTIFACT", artifact), ("-c", config_path), ("--model", model)) if v is not None]
    if len(given) != 1:
        raise InputError("give exactly one of: an artifact (.bin), -c cfg.yaml, or --model M.onnx --fast"
                         + (f" (got {', '.join(given)})" if given else ""), "see 'hbtool perf --help'")
    if model is not None and not fast:
        raise InputError("--model is the quick path, which calibrates on random data: add --fast",
                         "hbtool perf --model M.onnx --fast, or compile first and pass the .bin")
    if model is None and (fast or input_shapes):
        raise InputError("--fast and --input-shape belong to the quick path", "use them with --model M.onnx")
    cores = int(core_num) if core_num is not None else None
    target = artifact if artifact is not None else api.load_config(config_path) if config_path is not None else model
    with _progress_bar() as progress:
        run = api.perf(target, optimize_level=optimize_level, core_num=cores, compare_levels=compare_levels,
                       input_type_rt=input_type_rt, board=board, input_shapes=parse_input_shapes(input_shapes), march=march,
                       quick=model is not None, progress=_progress_callback(progress),
                       model_name=model_name)
    from rich.console import Console

    to_stdout = json_path is not None and str(json_path) == "-"
    stream = sys.stderr if to_stdout else sys.stdout  # JSON on stdout: the human report goes to stderr
    console = Console(stderr=to_stdout, width=None if stream.isatty() else 160)
    for note in run.notes:
        console.print(note)
    print_report(run.result, console, top=top)
    if run.levels:
        print_levels(run.levels, console)
    if json_path is not None:
        text = json.dumps(run.to_json(), indent=1) + "\n"
        if to_stdout:
            click.echo(text, nl=False)
        else:
            from hbtool.utils.atomic import atomic_write_text

            atomic_write_text(json_path, text)
            click.echo(f"wrote {json_path}")
    if output_dir is not None:
        from hbtool.perf.html import write_html

        for path in write_html(run.result, output_dir, run.levels):
            click.echo(f"wrote {path}")


@main.command()
@click.option("-c", "--config", "config_path", required=True, type=click.Path(path_type=Path), help="Horizon-style YAML config.")
@click.option("--output-dir", type=click.Path(path_type=Path), default=None, help="Where the report and fixes go (default: debug_parameters.report_dir).")
@click.option("--auto", "auto", is_flag=True, help="Apply remedies (int16, weight fixes, CPU) greedily until the target is met.")
@click.option("--target-cosine", type=float, default=0.99, show_default=True, help="--auto stops when the worst output's cosine reaches this.")
@click.option("--max-fps-loss", default="10%", show_default=True, help="--auto's FPS budget (perf cost model), e.g. 10% or 0.1.")
@click.option("--samples", type=int, default=None, help="Samples analysed (default: debug_parameters.num_samples).")
@click.option("--time-limit", default="30m", show_default=True,
              help="The command ends within this, report written (30m, 90s, 1h; 0 for none): --auto starts no try whose "
                   "measured cost would end past it less the measured ending, and keeps the best found so far.")
@click.option("--workers", type=int, default=None,
              help="--auto runs the tries of a round on this many worker processes (default: the machine's cores; 1: here). Same result.")
@click.option("--cluster", default=None, metavar="ADDRESS",
              help="--auto runs its tries on this Ray cluster (ray://HOST:10001, auto, or local); needs hbtool[cluster]. Same result.")
def debug(config_path: Path, output_dir: Path | None, auto: bool, target_cosine: float, max_fps_loss: str, samples: int | None,
          time_limit: str, workers: int | None, cluster: str | None) -> None:
    """Find the nodes that lose accuracy (op, model and accuracy error) and, with --auto, fix them at a measured FPS cost."""
    from rich.console import Console

    from hbtool import api
    from hbtool.debug.report_console import print_debug

    cfg = api.load_config(config_path)
    with _progress_bar() as progress:
        report = api.debug(cfg, auto=auto, target_cosine=target_cosine, max_fps_loss=max_fps_loss, samples=samples,
                           time_limit=time_limit, output_dir=output_dir, progress=_progress_callback(progress),
                           workers=workers, cluster=cluster)
    print_debug(report.details.data, Console(), top=cfg.debug.top_k)
    for path in report.files:
        click.echo(f"wrote {path}")


from hbtool.cli_release import register as _register_release  # noqa: E402  (gate, release, verify, diff, pack)

_register_release(main)

if __name__ == "__main__":  # pragma: no cover
    main()
