"""simulate in batches and streams: many samples per pass, bit-identical to one at a time, and resumable.

* the sample axis (:mod:`hbtool.simulator.batching`): a batch of S samples gives exactly the
  integers of S one-sample runs, and both equal the quantized ONNX model in onnxruntime, on a
  CNN, a Swin (window partition/reverse, Roll, masks) and a ViT (Concat of a class token,
  attention MatMuls); the tiny CNN runs with no step left sample by sample;
* the index-map form of movement ops (Pad, Expand, Roll, Concat with a constant...) against
  the one-sample ops on random codes;
* streaming: an interrupted ``simulate`` with ``--output-dir`` resumes where it stopped and
  writes the same bytes as an uninterrupted run; the CLI's ``--batch-size`` does not change
  any output.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from hbtool.cli import main
from hbtool.compiler.artifact import read_artifact
from hbtool.simulator.executor import Executor

ROOT = Path(__file__).resolve().parents[3]
HELDOUT = ROOT / "samples" / "data" / "digits_heldout.npz"


@pytest.fixture(scope="module", params=["tiny_cnn", "tiny_swin", "tiny_vit"])
def compiled(request, tmp_path_factory):
    from tests.unit.compiler.test_passes_layout_memory_artifact import tiny_config

    name = request.param
    tmp = tmp_path_factory.mktemp(f"batch_{name}")
    r = CliRunner().invoke(main, ["compile", "-c", str(tiny_config(tmp, name))])
    assert r.exit_code == 0, r.output
    return name, tmp / "wd"


def _images(n: int) -> np.ndarray:
    return np.load(HELDOUT)["images"][:n].astype(np.float32)


def test_a_batch_equals_one_sample_at_a_time_and_the_quantized_model(compiled):
    import onnxruntime as ort

    name, wd = compiled
    ex = Executor(read_artifact(wd / f"{name}.bin"))
    x = _images(7)
    batched = ex.run({"input": x})
    quant = ort.InferenceSession(str(wd / f"{name}_quantized_model.onnx"), providers=["CPUExecutionProvider"])
    for o in ex.output_names:
        singles = np.concatenate([ex.run({"input": x[i:i + 1]})[o] for i in range(len(x))])
        assert batched[o].shape == singles.shape == (7,) + tuple(ex.program.shape(o))[1:]
        assert np.array_equal(batched[o], singles), o
        ref = np.concatenate([quant.run([o], {"input": x[i:i + 1]})[0] for i in range(len(x))])
        assert np.array_equal(batched[o], ref.astype(np.float32)), o  # bit for bit, not within an LSB
    if name == "tiny_cnn":  # every step ran on the whole batch at once
        assert not [s.node.name for s in ex.steps if s.run.__qualname__.startswith("per_sample")]


def test_oversized_steps_run_in_sub_chunks_with_the_same_bits(compiled, monkeypatch):
    """Steps running 1, 2 or 3 samples per call inside passes of 5 (as oversized steps do): the same
    bits as one sample at a time."""
    from hbtool.simulator import executor as executor_module

    name, wd = compiled
    art = read_artifact(wd / f"{name}.bin")
    plain = Executor(art)
    monkeypatch.setattr(executor_module, "_chunk_sizes", lambda program, nodes: (5, [(None, 1, 2, 3)[k % 4] for k in range(len(nodes))]))
    ex = Executor(art)
    assert ex.micro_batch == 5 and sum(s.chunk is not None for s in ex.steps) >= len(ex.steps) // 2
    x = _images(7)
    batched = ex.run({"input": x})
    for o in ex.output_names:
        singles = np.concatenate([plain.run({"input": x[i:i + 1]})[o] for i in range(len(x))])
        assert np.array_equal(batched[o], singles), o


def test_the_pass_is_sized_by_the_bulk_of_the_steps_and_the_few_larger_ones_sub_chunked(monkeypatch):
    """A recogniser's shape: 40 steps of 100k elements, 2 of 700k logits. The pass takes 10 samples
    (not the one the logits alone would allow); the logits steps run one sample per call."""
    from hbtool.simulator import executor as executor_module

    sizes = [100_000] * 40 + [700_000] * 2
    monkeypatch.setattr(executor_module, "_step_size", lambda program, node: node)
    per_pass, chunks = executor_module._chunk_sizes(None, sizes)
    assert per_pass == executor_module.MICRO_BATCH_ELEMENTS // 100_000 == 10
    assert chunks == [None] * 40 + [1, 1]
    assert executor_module._chunk_sizes(None, [2_000_000] * 5) == (1, [None] * 5)  # one sample per pass: nothing to split


def test_tensors_written_as_their_readers_dtype_are_the_numpy_forms_integers(compiled):
    """Where a requantizing loop writes float32 / int8 for its readers, every tensor still equals the kernels'
    numpy forms, the outputs the quantized model's, and a kept tensor comes back as int16."""
    name, wd = compiled
    art = read_artifact(wd / f"{name}.bin")
    fast, slow = Executor(art), Executor(art, fast=False)
    computed = {o for s in fast.steps for o in s.outputs if o}
    x = _images(3)
    got, want = fast.run({"input": x}, keep=computed), slow.run({"input": x}, keep=computed)
    if name == "tiny_cnn":
        assert fast.narrowed  # its convolutions hand float32 / int8 to the next product
    for o in computed:
        assert np.array_equal(got[o], want[o]), o
        if o in fast.narrowed:
            assert got[o].dtype == np.int16, o


def test_passes_run_on_two_threads_at_once_give_the_same_bits(compiled):
    """``parallel_passes``: a batch's passes on two threads at once, with the pass cap shrunk so there are
    several: the same bits as one sample at a time, in sample order."""
    name, wd = compiled
    art = read_artifact(wd / f"{name}.bin")
    plain = Executor(art)
    ex = Executor(art, threads=2, parallel_passes=True)
    ex.micro_batch = 2
    assert ex.pass_workers == 2 and Executor(art, threads=2, parallel_passes=False).pass_workers == 1
    x = _images(7)
    batched = ex.run({"input": x})
    for o in ex.output_names:
        singles = np.concatenate([plain.run({"input": x[i:i + 1]})[o] for i in range(len(x))])
        assert np.array_equal(batched[o], singles), o


def test_passes_run_at_once_by_default_unless_switched_off(compiled, monkeypatch):
    """On since 2026-12-07 (docs/simulate.md); ``HBTOOL_SIM_PARALLEL_PASSES=0`` runs them one after another."""
    name, wd = compiled
    art = read_artifact(wd / f"{name}.bin")
    monkeypatch.delenv("HBTOOL_SIM_PARALLEL_PASSES", raising=False)
    assert Executor(art, threads=2).pass_workers == 2
    monkeypatch.setenv("HBTOOL_SIM_PARALLEL_PASSES", "0")
    assert Executor(art, threads=2).pass_workers == 1


def _movement_model(tmp: Path) -> Path:
    """x (1, 4, 6, 6) int-valued float -> Pad (reflect), Expand, Concat with a constant, Roll-like Slice+Concat, Tile."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 18, 9])
    inits = [numpy_helper.from_array(np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64), "pads"),
             numpy_helper.from_array(np.full((1, 1, 9, 9), 5.0, np.float32), "const"),
             numpy_helper.from_array(np.array([1, 1, 2, 1], np.int64), "reps")]
    nodes = [helper.make_node("Pad", ["x", "pads"], ["p"], mode="reflect"),
             helper.make_node("Concat", ["p", "const"], ["c"], axis=1),
             helper.make_node("Tile", ["c", "reps"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "movement", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp / "movement.onnx"
    onnx.save(model, path)
    return path


def test_movement_index_maps_match_the_one_sample_ops(tmp_path):
    from hbtool.ir.onnx_import import import_onnx
    from hbtool.simulator.batching import movement_step
    from hbtool.kernels.movement import MOVEMENT

    graph = import_onnx(_movement_model(tmp_path))
    assert [n.op_type for n in graph.nodes] == ["Pad", "Concat", "Tile"]
    rng = np.random.default_rng(0)
    values = {"x": rng.integers(-128, 128, (5, 1, 4, 6, 6)).astype(np.int16)}
    for node in graph.nodes:
        one = lambda xs, node=node: MOVEMENT[node.op_type](node, graph, *xs)  # noqa: E731
        batched = movement_step(node, graph, one)
        assert not batched.__qualname__.startswith("per_sample"), node.op_type
        xs = [values[i] if i in values else graph.const(i) if i else None for i in node.inputs]
        got = batched(xs)[0]
        want = np.stack([one([x[s] if i in values else x for x, i in zip(xs, node.inputs)])[0] for s in range(5)])
        assert got.shape == want.shape and np.array_equal(got, want), node.op_type
        values[node.outputs[0]] = got


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    from tests.unit.compiler.test_passes_layout_memory_artifact import tiny_config

    tmp = tmp_path_factory.mktemp("stream_cnn")
    r = CliRunner().invoke(main, ["compile", "-c", str(tiny_config(tmp, "tiny_cnn"))])
    assert r.exit_code == 0, r.output
    return tmp / "wd"


class _Stop(KeyboardInterrupt):
    pass


def test_an_interrupted_run_resumes_and_writes_the_same_files(cnn, tmp_path):
    from hbtool.simulator.simulate import simulate

    art = cnn / "tiny_cnn.bin"
    np.save(tmp_path / "x.npy", _images(45))
    inputs = {"input": tmp_path / "x.npy"}
    compare = cnn / "tiny_cnn_quantized_model.onnx"
    full = simulate(art, inputs, tmp_path / "full", compare=compare, batch_size=4)

    seen = []

    def interrupt_after_three(stage, done, total):
        seen.append(done)
        if len(seen) == 3:
            raise _Stop()

    with pytest.raises(_Stop):
        simulate(art, inputs, tmp_path / "part", compare=compare, batch_size=4, progress=interrupt_after_three)
    assert seen == [4, 8, 12]
    assert not (tmp_path / "part" / "logits.npy").exists()  # only complete files appear
    resumed = simulate(art, inputs, tmp_path / "part", compare=compare, batch_size=4, resume=True)
    assert resumed.samples == 45 and resumed.samples_run == 45 - 12
    a = (tmp_path / "full" / "logits.npy").read_bytes()
    assert a == (tmp_path / "part" / "logits.npy").read_bytes()
    assert np.load(tmp_path / "full" / "logits.npy").shape == (45, 10)
    assert not (tmp_path / "part" / ".partial").exists()
    # the comparison table covers all 45 samples, resumed or not
    assert [c.within_1lsb for c in resumed.comparisons] == [c.within_1lsb for c in full.comparisons] == [1.0]
    assert resumed.comparisons[0].cosine == pytest.approx(full.comparisons[0].cosine, abs=1e-12)


def test_resume_ignores_a_partial_run_of_other_inputs(cnn, tmp_path):
    from hbtool.simulator.simulate import simulate

    art = cnn / "tiny_cnn.bin"
    np.save(tmp_path / "a.npy", _images(12))
    np.save(tmp_path / "b.npy", _images(12)[::-1].copy())

    def stop(stage, done, total):
        raise _Stop()

    with pytest.raises(_Stop):
        simulate(art, {"input": tmp_path / "a.npy"}, tmp_path / "out", batch_size=4, progress=stop)
    again = simulate(art, {"input": tmp_path / "b.npy"}, tmp_path / "out", batch_size=4, resume=True)
    assert again.samples_run == 12  # a different input file: started over
    direct = Executor(read_artifact(art)).run({"input": np.load(tmp_path / "b.npy")})["logits"]
    assert np.array_equal(np.load(tmp_path / "out" / "logits.npy"), direct)


def test_cli_batch_size_does_not_change_outputs(cnn, tmp_path):
    np.save(tmp_path / "x.npy", _images(23))
    outs = []
    for b in (1, 5, 64):
        r = CliRunner().invoke(main, ["simulate", str(cnn / "tiny_cnn.bin"), "--input", f"input={tmp_path / 'x.npy'}",
                                      "--output-dir", str(tmp_path / f"b{b}"), "--batch-size", str(b)])
        assert r.exit_code == 0, r.output
        assert "simulated 23 samples" in r.output
        outs.append((tmp_path / f"b{b}" / "logits.npy").read_bytes())
    assert outs[0] == outs[1] == outs[2]


@pytest.mark.parametrize("args, message", [
    (["--resume"], "--resume needs --output-dir"),
    (["--batch-size", "0"], "--batch-size 0"),
    (["--threads", "0"], "'--threads': 0 is not in the range x>=1"),
])
def test_bad_stream_options_are_one_line_errors(cnn, tmp_path, args, message):
    np.save(tmp_path / "x.npy", _images(2))
    r = CliRunner().invoke(main, ["simulate", str(cnn / "tiny_cnn.bin"), "--input", f"input={tmp_path / 'x.npy'}", *args])
    assert r.exit_code == 2, r.output
    assert message in r.output and "fix:" in r.output and len(r.output.strip().splitlines()) == 1


@pytest.mark.parametrize("a_shape, b_shape", [((2, 5, 3, 4), (2, 5, 1, 1)), ((2, 5, 3, 4), (5, 1, 1)), ((1, 5, 1, 1), (3, 5, 6, 2)),
                                              ((2, 5, 3, 4), (1,)), ((4, 6), (4, 1)), ((2, 5, 3, 4), (1, 5, 1, 1))])
@pytest.mark.parametrize("sub", [False, True])
def test_channel_scale_add_and_mul_run_one_value_per_row_bit_exact(a_shape, b_shape, sub):
    """The SE-block form: one operand constant over the trailing axes of the other (no broadcast copy)."""
    from hbtool.kernels import Add, Mul
    from hbtool.simulator import accel

    rng = np.random.default_rng(3)
    a = rng.integers(-32768, 32768, a_shape)
    b = rng.integers(-128, 128, b_shape)
    a.reshape(-1)[:2] = [-32768, 32767]
    assert accel._row_scalars(a.astype(np.int16), b.astype(np.int16)) is not None
    add = Add.build(0.02, 0.003, 0.025, 16, 16, 8, sub=sub)
    np.testing.assert_array_equal(accel.accelerate(add)(a.astype(np.int16), b.astype(np.int16)), add.apply_numpy(a, b))
    mul = Mul.build(0.02, 0.0003, 0.01, 16, 8, 8)
    np.testing.assert_array_equal(accel.accelerate(mul)(a.astype(np.int16), b.astype(np.int16)), mul.apply_numpy(a, b))
