"""simulate --workers N / --cluster: sample ranges on worker processes or a Ray cluster, the same bytes.

* ``--workers 2`` writes output files byte-identical to ``--workers 1``, and the --compare table is
  the same numbers (the running sums are added in sample order by the caller);
* the library with arrays in memory gives the same outputs sharded;
* a sharded run interrupted after some ranges resumes (sharded or not) into the same bytes;
* a local Ray cluster gives the same bytes;
* ``--workers 0`` is a one-line usage error;
* the ranges cover every sample once, in whole batches.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hbtool.cli import main
from hbtool.simulator.shards import shard_bounds

ROOT = Path(__file__).resolve().parents[3]
HELDOUT = ROOT / "samples" / "data" / "digits_heldout.npz"


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    from tests.unit.compiler.test_passes_layout_memory_artifact import tiny_config

    tmp = tmp_path_factory.mktemp("shard_cnn")
    r = CliRunner().invoke(main, ["compile", "-c", str(tiny_config(tmp, "tiny_cnn"))])
    assert r.exit_code == 0, r.output
    return tmp / "wd"


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("shard_inputs") / "x.npy"
    np.save(path, np.load(HELDOUT)["images"][:37].astype(np.float32))
    return path


def _cli(cnn: Path, images: Path, out: Path, *extra: str):
    return CliRunner().invoke(main, ["simulate", str(cnn / "tiny_cnn.bin"), "--input", f"input={images}", "--output-dir", str(out),
                                     "--batch-size", "4", "--compare", str(cnn / "tiny_cnn_original_float_model.onnx"), *extra])


def _table(output: str) -> list[str]:
    return [line for line in output.splitlines() if "logits" in line and "wrote" not in line]


def test_two_workers_write_the_same_bytes_and_table_as_one(cnn, images, tmp_path):
    one = _cli(cnn, images, tmp_path / "w1", "--workers", "1")
    two = _cli(cnn, images, tmp_path / "w2", "--workers", "2")
    assert one.exit_code == 0, one.output
    assert two.exit_code == 0, two.output
    assert (tmp_path / "w1" / "logits.npy").read_bytes() == (tmp_path / "w2" / "logits.npy").read_bytes()
    assert _table(one.output) and _table(one.output) == _table(two.output)


def test_library_arrays_sharded_equal_one_process(cnn, images):
    from hbtool import api

    x = np.load(images)
    one = api.simulate_report(cnn / "tiny_cnn.bin", {"input": x}, batch_size=3,
                              compare=cnn / "tiny_cnn_original_float_model.onnx")
    two = api.simulate_report(cnn / "tiny_cnn.bin", {"input": x}, batch_size=3, workers=2,
                              compare=cnn / "tiny_cnn_original_float_model.onnx")
    assert np.array_equal(one.outputs["logits"], two.outputs["logits"])
    assert one.outputs["logits"].shape == (37, 10)
    assert [c.cosine for c in one.comparisons] == [c.cosine for c in two.comparisons]
    assert [c.l2 for c in one.comparisons] == [c.l2 for c in two.comparisons]


class _Stop(KeyboardInterrupt):
    pass


def test_an_interrupted_sharded_run_resumes_into_the_same_bytes(cnn, images, tmp_path):
    from hbtool.simulator.simulate import simulate

    art = cnn / "tiny_cnn.bin"
    full = simulate(art, {"input": images}, tmp_path / "full", batch_size=4)
    seen = []

    def stop_after_two(stage, done, total):
        seen.append(done)
        if len(seen) == 2:
            raise _Stop()

    with pytest.raises(_Stop):
        simulate(art, {"input": images}, tmp_path / "part", batch_size=4, workers=2, progress=stop_after_two)
    assert seen == [4, 8]
    assert not (tmp_path / "part" / "logits.npy").exists()
    resumed = simulate(art, {"input": images}, tmp_path / "part", batch_size=4, workers=2, resume=True)
    assert resumed.samples_run == 37 - 8
    assert (tmp_path / "part" / "logits.npy").read_bytes() == full.files[0].read_bytes()


def test_local_ray_cluster_writes_the_same_bytes(cnn, images, tmp_path):
    pytest.importorskip("ray")
    one = _cli(cnn, images, tmp_path / "w1")
    ray = _cli(cnn, images, tmp_path / "ray", "--cluster", "local", "--workers", "2")
    assert one.exit_code == 0, one.output
    assert ray.exit_code == 0, ray.output
    assert (tmp_path / "w1" / "logits.npy").read_bytes() == (tmp_path / "ray" / "logits.npy").read_bytes()
    assert _table(one.output) == _table(ray.output)


def test_workers_zero_is_a_one_line_error(cnn, images, tmp_path):
    r = _cli(cnn, images, tmp_path / "w0", "--workers", "0")
    assert r.exit_code == 2, r.output
    assert r.output.strip().startswith("hbtool: error: --workers 0") and "fix:" in r.output
    assert len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "w0").exists()


@pytest.mark.parametrize("start, total, batch, workers", [(0, 37, 4, 2), (8, 37, 4, 2), (0, 1000, 16, 3), (0, 5, 16, 2), (5, 5, 4, 2)])
def test_ranges_cover_every_sample_once_in_whole_batches(start, total, batch, workers):
    bounds = shard_bounds(start, total, batch, workers)
    covered = [i for a, b in bounds for i in range(a, b)]
    assert covered == list(range(start, total))
    assert all((b - a) % batch == 0 or b == total for a, b in bounds)
    assert all(b - a <= 8 * batch for a, b in bounds)


def test_a_worker_keeps_freed_memory_with_one_arena(cnn, monkeypatch):
    """Each worker process sets the allocator as the command does (its passes' threads reuse their memory)."""
    from hbtool.simulator import shards
    from hbtool.utils import allocator

    calls = []
    monkeypatch.setattr(allocator, "keep_freed_memory", lambda one_arena=False: calls.append(one_arena) or True)
    shards._open_worker(str(cnn / "tiny_cnn.bin"), None, {}, None, 1)
    assert calls == [True]
