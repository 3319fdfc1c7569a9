"""hbtool.qat from user code (prepare / convert), resume, the sampler, the device error."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from hbtool.errors import InputError


class SmallNet(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        return self.fc(x.mean(dim=(2, 3)))


def test_prepare_train_convert_lowers_to_the_module(tmp_path):
    import hbtool.qat as hq
    from hbtool.ir.onnx_import import import_onnx
    from hbtool.march.description import load_march
    from hbtool.compiler.source import lower_calibrated
    from hbtool.quant.quantized_model import to_quantized_onnx
    from tests.helpers import cosine, run_ort

    net = SmallNet().eval()
    rng = np.random.default_rng(0)
    examples = [torch.from_numpy(rng.standard_normal((1, 3, 10, 10)).astype(np.float32)) for _ in range(8)]
    qat = hq.prepare(net, examples, config={"calibration_parameters": {"calibration_type": "max"}}, work_dir=tmp_path)
    x = torch.cat(examples[:4])
    with torch.no_grad():
        ref = net(x)
    assert cosine(qat(x)[0].detach().numpy(), ref.numpy()) > 0.99
    opt = torch.optim.Adam(qat.parameters(), lr=1e-3)
    for _ in range(3):  # the user's own loop: distil towards the torch model
        loss = ((qat(x)[0] - ref) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        assert all(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in qat.named_weights().values())
        opt.step()
    path = hq.convert(qat, tmp_path / "net_qat_model.onnx")
    lowered = lower_calibrated(import_onnx(path), load_march("bayes"))
    assert not lowered.report.fallbacks
    feeds = rng.standard_normal((2, 1, 3, 10, 10)).astype(np.float32)
    q = to_quantized_onnx(lowered.program)
    name = lowered.program.inputs[0]
    with torch.no_grad():
        ours = qat(torch.from_numpy(feeds.reshape(2, 3, 10, 10)))[0].numpy()
    theirs = np.concatenate([run_ort(q, {name: f})[0] for f in feeds])
    assert np.array_equal(ours, theirs)


def _cfg(tmp_path, **qat):
    from tests.unit.qat.test_train_export_and_compile import _config, cnn_model

    cfg, _ = _config(tmp_path, cnn_model(), (1, 3, 12, 12), qat=qat)
    return cfg


def test_resume_continues_the_same_run(tmp_path):
    from hbtool.qat.train import run_qat
    from hbtool.quant.calibrate import run_calibration

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    full_cfg = _cfg(tmp_path / "a", steps=4, checkpoint_every=2)
    cal = run_calibration(full_cfg)
    full = run_qat(full_cfg, calibration=cal, export=False)
    half_cfg = _cfg(tmp_path / "b", steps=2)
    run_qat(half_cfg, calibration=cal, export=False)
    resumed = run_qat(_cfg(tmp_path / "b", steps=4), calibration=cal, resume=True, export=False)
    assert len(resumed.losses) == 4
    assert resumed.losses == pytest.approx(full.losses, rel=1e-6)
    for k, w in full.model.named_weights().items():
        assert torch.equal(w.detach(), resumed.model.named_weights()[k].detach()), k


def test_resume_without_checkpoint_is_an_input_error(tmp_path):
    from hbtool.qat.train import run_qat

    with pytest.raises(InputError, match="no checkpoint"):
        run_qat(_cfg(tmp_path, steps=1), resume=True)


def test_cuda_without_a_gpu_is_an_input_error(tmp_path):
    from hbtool.qat.train import run_qat

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(InputError, match="no CUDA device"):
        run_qat(_cfg(tmp_path, device="cuda"))


def test_shard_sampler_splits_the_one_process_batches():
    from hbtool.qat.distributed import DistInfo, ShardSampler

    one = ShardSampler(50, 8, DistInfo(), seed=3)
    shards = [ShardSampler(50, 8, DistInfo(rank=r, world=2), seed=3) for r in range(2)]
    for step in range(14):  # across an epoch boundary (6 steps per epoch)
        glob = one.global_indices(step)
        assert len(glob) == 8 and len(set(glob.tolist())) == 8
        assert np.array_equal(np.concatenate([s.local_indices(step) for s in shards]), glob)
    with pytest.raises(InputError, match="divisible"):
        ShardSampler(50, 7, DistInfo(rank=0, world=2))


def test_ce_with_labels_and_distill_tensors(tmp_path):
    """loss: ce reads the labels (a wrong count is an error); distill_tensors adds intermediate terms."""
    from hbtool.qat.train import run_qat
    from hbtool.quant.calibrate import run_calibration

    labels = tmp_path / "labels.txt"
    labels.write_text("\n".join(str(k % 5) for k in range(24)) + "\n")
    cfg = _cfg(tmp_path, steps=2, loss="ce", labels=str(labels))
    cal = run_calibration(cfg)
    ce = run_qat(cfg, calibration=cal, export=False)
    # the first step's loss is the cross entropy of the PTQ model on the first batch's labels
    from hbtool.qat.data import training_data
    from hbtool.qat.distributed import DistInfo, ShardSampler
    from hbtool.qat.train import build_model

    data = training_data(cfg, cal.graph)
    ids = np.arange(data.num_samples - 4)[ShardSampler(data.num_samples - 4, 4, DistInfo(), 0).local_indices(0)]
    x = torch.from_numpy(np.concatenate([data.sample(int(i))["x"] for i in ids]))
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(build_model(cfg, cal)(x)[0], torch.tensor([int(i) % 5 for i in ids]))
    assert ce.losses[0] == pytest.approx(float(expected), rel=1e-5)
    labels.write_text("1\n2\n")
    with pytest.raises(InputError, match="labels holds 2"):
        run_qat(_cfg(tmp_path, steps=1, loss="ce", labels=str(labels)), calibration=cal, export=False)
    with_tensor = run_qat(_cfg(tmp_path, steps=1, distill_tensors="a"), calibration=cal, export=False)
    plain = run_qat(_cfg(tmp_path, steps=1), calibration=cal, export=False)
    assert with_tensor.losses[0] > plain.losses[0] > 0  # the extra term adds its own (positive) error
