"""The CI and release commands: ``gate``, ``release``, ``verify``, ``diff``, ``pack``.

Registered on the ``hbtool`` click group by :func:`register`; each is a thin wrapper over
:mod:`hbtool.release` (and :mod:`hbtool.compiler.pack`). A failed gate, a bundle that does not
verify, or a regression beyond a ``diff`` limit is :class:`hbtool.errors.GateFailed`: exit code 4,
one stderr line per failure (docs/ci.md).
"""

from __future__ import annotations

from pathlib import Path

import click

from hbtool.errors import InputError


def print_gates(report) -> None:
    """The gate table on stdout (the JSON and JUnit files hold the same)."""
    from rich.console import Console
    from rich.table import Table

    from hbtool.release.gates import fmt

    table = Table(title=f"gates ({report.model})")
    for col in ("gate", "limit", "measured", "pass", "detail"):
        table.add_column(col)
    for r in report.results:
        table.add_row(r.key, fmt(r.limit), fmt(r.measured), "[green]pass[/green]" if r.passed else "[red]FAIL[/red]", r.detail)
    Console(width=160).print(table)


def require_gates_for_junit(cfg, junit: Path | None) -> None:
    """``--junit`` without a gate to report is a usage error, said before minutes of building."""
    from hbtool.release.gates import asked

    if junit is not None and not asked(cfg):
        raise InputError("--junit: the config has no gate_parameters, so there is no gate to report",
                         "add gate_parameters (docs/ci.md) or drop --junit")


def gate_after_build(cfg, artifact: Path, junit: Path | None, workers: int = 1, cluster: str | None = None) -> None:
    """makertbin's last step when the config has ``gate_parameters``: measure, write, print, exit 4 on a failure."""
    from hbtool.release.gates import asked, check

    require_gates_for_junit(cfg, junit)
    if not asked(cfg):
        return
    report = check(cfg, artifact, junit, workers, cluster)
    print_gates(report)
    for path in report.files:
        click.echo(f"wrote {path}")
    report.raise_if_failed()


def stage_printer(cfg, max_rows: int):
    """``report(stage, result)`` for :func:`hbtool.api.makertbin`: each stage's table as ``makertbin`` prints it."""
    from hbtool.checker.report import print_checker_report
    from hbtool.compiler.compile import print_compile_summary
    from hbtool.quant.report import print_report

    def report(stage: str, result) -> None:
        if stage == "checker":
            print_checker_report(result, max_rows=max_rows)
        elif stage == "calibrate":
            print_report(result, max_rows=max_rows)
        elif stage == "compile":
            print_compile_summary(cfg, result)

    return report


def register(main: click.Group) -> None:
    """Add the commands of this module to ``main``."""
    for command in (gate, release, verify, diff, pack):
        main.add_command(command)


@click.command()
@click.option("-c", "--config", "config_path", required=True, type=click.Path(path_type=Path), help="Horizon-style YAML config with gate_parameters.")
@click.option("--junit", type=click.Path(path_type=Path), default=None, help="Also write a JUnit XML report here (one testcase per gate).")
@click.option("--workers", type=int, default=1, show_default=True, help="Worker processes that simulate the held-out samples (as simulate --workers; same numbers).")
@click.option("--cluster", default=None, metavar="ADDRESS", help="Simulate the held-out samples on a Ray cluster (local, auto or ray://HOST:10001).")
def gate(config_path: Path, junit: Path | None, workers: int, cluster: str | None) -> None:
    """Check the config's gates on its existing working_dir (no rebuild); exit 4 when one fails."""
    from hbtool import api
    from hbtool.compiler.compile import artifact_path
    from hbtool.release.gates import asked
    from hbtool.utils.workers import check_workers

    check_workers(workers)

    cfg = api.load_config(config_path)
    if not asked(cfg):
        raise InputError(f"{config_path}: gate_parameters sets no gate", "add e.g. gate_parameters: {min_fps: 100} (docs/ci.md)")
    artifact = artifact_path(cfg)
    if not artifact.exists():
        raise InputError(f"{artifact} not found: hbtool gate checks an existing build", "run hbtool makertbin -c cfg.yaml first")
    gate_after_build(cfg, artifact, junit, workers, cluster)


@click.command()
@click.option("-c", "--config", "config_path", required=True, type=click.Path(path_type=Path), help="Horizon-style YAML config.")
@click.option("-o", "--output-dir", "out_dir", required=True, type=click.Path(path_type=Path), help="The release folder to write.")
@click.option("--junit", type=click.Path(path_type=Path), default=None, help="Also write the gates' JUnit XML here (it is in DIR/reports too).")
@click.option("--max-rows", type=click.IntRange(min=0), default=10, show_default=True, help="Rows of the checker and calibration tables.")
@click.option("--workers", type=int, default=1, show_default=True, help="Worker processes that simulate the gates' held-out samples (same numbers).")
@click.option("--cluster", default=None, metavar="ADDRESS", help="Simulate the gates' held-out samples on a Ray cluster (local, auto or ray://HOST:10001).")
def release(config_path: Path, out_dir: Path, junit: Path | None, max_rows: int, workers: int, cluster: str | None) -> None:
    """makertbin, the gates, and a reproducible release folder (artifact, manifest.json, reports/, check/); exit 4 on a failed gate."""
    from hbtool import api
    from hbtool.release.bundle import write_release

    from hbtool.utils.workers import check_workers

    check_workers(workers)
    cfg = api.load_config(config_path)
    require_gates_for_junit(cfg, junit)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"--output-dir {out_dir} is a file", "give a folder (it is created if missing)")
    built = api.makertbin(cfg, report=stage_printer(cfg, max_rows))
    done = write_release(cfg, built.path, built.calibration.data, out_dir, workers, cluster)
    m = done.manifest
    click.echo(f"release {m['model']} ({m['march']}): artifact sha256 {m['artifact_sha256']}, "
               f"{m['perf']['fps']} FPS, {m['perf']['latency_ms']} ms")
    for path in done.files:
        click.echo(f"wrote {path}")
    if done.gates is not None:
        print_gates(done.gates)
        if junit is not None:
            from hbtool.release.junit import render_junit
            from hbtool.utils.atomic import atomic_write_bytes

            atomic_write_bytes(junit, render_junit(done.gates))
            click.echo(f"wrote {junit}")
        done.gates.raise_if_failed()


@click.command(name="verify")
@click.argument("bundle", type=click.Path(path_type=Path))
def verify(bundle: Path) -> None:
    """Check a release folder against its manifest: artifact hash, check files, re-simulated outputs bit for bit; exit 4 on a difference."""
    from hbtool.release.verify import verify_or_raise

    m = verify_or_raise(bundle)
    click.echo(f"verified {bundle}: {m['artifact']['file']} sha256 {m['artifact_sha256']}, "
               f"{(m.get('check') or {}).get('samples', 0)} check samples bit for bit")


@click.command(name="diff")
@click.argument("old", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option("--max-cosine-drop", type=click.FloatRange(min=0), default=None, help="Exit 4 when an output's cosine vs float drops by more than this (absolute, e.g. 0.01).")
@click.option("--max-metric-drop", type=click.FloatRange(min=0), default=None, help="Exit 4 when debug_parameters.metric drops by more than this (absolute).")
@click.option("--max-fps-drop", type=click.FloatRange(min=0), default=None, help="Exit 4 when the estimated FPS drops by more than this many percent.")
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None, help="Also write the deltas as JSON here ('-': stdout).")
def diff(old: Path, new: Path, max_cosine_drop: float | None, max_metric_drop: float | None, max_fps_drop: float | None,
         json_path: Path | None) -> None:
    """Compare two releases (folders or manifest.json): cosine, metric, FPS, latency, size, precision per node; exit 4 on a regression beyond a limit."""
    import json

    from hbtool.release.diff import diff as run_diff
    from hbtool.release.diff import raise_on_regression

    d = run_diff(old, new, max_cosine_drop, max_metric_drop, max_fps_drop)
    text = json.dumps(d.deltas, indent=1, sort_keys=True) + "\n"
    if json_path is not None and str(json_path) == "-":
        click.echo(text, nl=False)
    else:
        for line in d.lines:
            click.echo(line)
        if json_path is not None:
            from hbtool.utils.atomic import atomic_write_text

            atomic_write_text(json_path, text)
            click.echo(f"wrote {json_path}")
    raise_on_regression(d)


@click.command(name="pack")
@click.argument("artifacts", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output", "output", required=True, type=click.Path(path_type=Path), help="The packed artifact to write.")
def pack(artifacts: tuple[Path, ...], output: Path) -> None:
    """Pack several compiled models into one artifact (like hb_pack); info lists them, simulate/perf --model-name run one."""
    from hbtool.compiler.pack import members_of
    from hbtool.compiler.pack import pack as pack_files
    from hbtool.utils.atomic import atomic_write_bytes

    if len(artifacts) < 2:
        raise InputError("pack: give at least two artifacts", "hbtool pack a.bin b.bin -o models.bin")
    data = pack_files(list(artifacts))
    atomic_write_bytes(output, data)
    click.echo(f"packed {', '.join(members_of(data))} into {output} ({len(data):,} bytes)")
