"""Data-parallel QAT: 2 CPU processes (gloo) match 1 process with the same global batch.

Outside the default run (marked ``slow``: ``pytest -m slow``): it starts two interpreters. Tolerance: the trained weights
agree within 1e-5 relative to their largest magnitude, and the two runs' losses within 1e-5
relative (the gradients differ only in float summation order; the integer forward passes are
the same integers as long as no value sits on a rounding boundary)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.slow  # starts two interpreters


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train(tmp: Path, out: Path) -> None:
    from hbtool.qat.train import run_qat
    from tests.unit.qat.test_train_export_and_compile import _config, cnn_model

    torch.set_num_threads(1)
    cfg, _ = _config(tmp, cnn_model(), (1, 3, 12, 12), qat={"steps": 4, "batch_size": 8, "lr": 3e-3, "val_samples": 4})
    result = run_qat(cfg, export=False)
    if int(os.environ.get("RANK", "0")) == 0:
        source = getattr(result.calibration, "quantized_source", None) or result.calibration.graph  # what build_model reads
        start = {name: torch.from_numpy(np.array(source.const(name))) for name in result.model.named_weights()}
        torch.save({"weights": {k: v.detach() for k, v in result.model.named_weights().items()}, "start": start,
                    "losses": result.losses}, out)


def _worker(rank: int, world: int, port: int, tmp: str, out: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    _train(Path(tmp) / f"rank{rank}", Path(out))
    import torch.distributed as dist

    dist.destroy_process_group()


def test_two_processes_match_one(tmp_path):
    import torch.multiprocessing as mp

    one = tmp_path / "one.pt"
    (tmp_path / "single").mkdir()
    _train(tmp_path / "single", one)
    two = tmp_path / "two.pt"
    for r in range(2):
        (tmp_path / f"rank{r}").mkdir()
    mp.spawn(_worker, args=(2, _free_port(), str(tmp_path), str(two)), nprocs=2, join=True)
    a, b = torch.load(one), torch.load(two)
    assert len(a["losses"]) == len(b["losses"]) == 4
    np.testing.assert_allclose(a["losses"], b["losses"], rtol=1e-5)
    for k, w in a["weights"].items():
        scale = float(w.abs().max())
        assert float((w - b["weights"][k]).abs().max()) <= 1e-5 * scale, k
    # and training did move the weights (the comparison is not of two untouched models)
    assert max(float((w - a["start"][k]).abs().max()) for k, w in a["weights"].items()) > 1e-4
