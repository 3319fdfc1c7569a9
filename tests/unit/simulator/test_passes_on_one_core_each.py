"""Inside ``cores.one_core`` a thread's steps do not split: the loops run unsplit, the product sessions
in their one-thread twin, with the same results.

Why it matters: a batch's passes on several threads at once (``Executor(..., parallel_passes=True)``)
each keep a core busy; steps that split as well queued on the one loop pool and woke onnxruntime's
worker threads per call (docs/simulate.md, "Speed in one process").
"""

import threading

import numpy as np

from hbtool.kernels.builder import ElemType
from hbtool.simulator import accel, jit, onnx_bytes
from hbtool.simulator.cores import one_core, on_one_core


def _matmul_session(threads):
    w = (np.arange(48, dtype=np.float32).reshape(8, 6) % 7) - 3
    model = onnx_bytes.model([onnx_bytes.node("MatMul", ["x", "w"], ["y"])], {"x": ElemType.FLOAT},
                             {"y": ElemType.FLOAT}, {"w": w})
    return accel._session(model, threads), w


def test_one_core_is_per_thread_and_nests():
    seen = []
    with one_core():
        with one_core():
            assert on_one_core()
        assert on_one_core()
        t = threading.Thread(target=lambda: seen.append(on_one_core()))
        t.start()
        t.join()
    assert not on_one_core() and seen == [False]


def test_a_two_thread_session_runs_its_one_thread_twin_inside_one_core():
    session, w = _matmul_session(2)
    x = np.arange(40, dtype=np.float32).reshape(5, 8) - 20
    (outside,) = session.run(["y"], {"x": x})
    assert session._single is None  # not built until a thread on one core asks for it
    with one_core():
        (inside,) = session.run(["y"], {"x": x})
    assert session._single is not None and session._single is not session.session
    assert session._single.get_session_options().intra_op_num_threads == 1
    assert session.get_session_options().intra_op_num_threads == 2
    assert np.array_equal(outside, x @ w) and np.array_equal(inside, outside)


def test_a_one_thread_session_is_its_own_twin():
    session, _ = _matmul_session(1)
    assert session._single is session.session


def test_loops_do_not_split_inside_one_core(monkeypatch):
    calls = []

    def loop(r0, r1, out):
        calls.append((r0, r1))
        out[r0:r1] = 1

    monkeypatch.setattr(jit, "_compiled", lambda loop, args: True)
    jit.set_threads(2)
    rows = 64
    out = np.zeros(rows, np.int64)
    jit.over_rows(loop, rows, jit.MIN_PARALLEL_WORK, out)
    assert sorted(calls) == [(0, 32), (32, 64)]
    calls.clear()
    with one_core():
        jit.over_rows(loop, rows, jit.MIN_PARALLEL_WORK, out)
    assert calls == [(0, rows)] and out.sum() == rows
    jit.set_threads(None)
