"""``hbtool qat``: PTQ, then training of the integer program, then the ``*_qat_model.onnx``.

1. Calibrate as ``hbtool calibrate`` would (the PTQ result initialises everything: scales,
   int8/int16 choices, bias correction).
2. Build the :class:`~hbtool.qat.module.QatModel` (the program itself, trainable) and the
   float teacher (the optimized float graph in torch).
3. Train: ``loss: distill`` (default) matches the float model's outputs, and optionally
   named intermediate tensors, with a mean squared error normalised by the float output's
   mean square (no labels needed); ``loss: ce`` uses ``labels``. Progress reports the loss;
   the validation samples (held out of training when there are enough) give the output
   cosine vs float before and after, and the caller's ``metric`` when given.
4. Checkpoints (``checkpoint_every``) hold weights, scales, optimizer state and the step;
   ``resume`` continues the same sample sequence (:class:`~hbtool.qat.distributed.ShardSampler`).
5. Export (:mod:`hbtool.qat.export`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from hbtool.config.types import HbConfig
from hbtool.errors import InputError
from hbtool.qat.data import augment, read_labels, training_data
from hbtool.qat.distributed import DistInfo, ShardSampler, barrier, data_parallel, init_distributed, resolve_device
from hbtool.qat.export import export_qat_model, qat_model_path
from hbtool.qat.module import FloatGraphModule, QatModel

Progress = Callable[[int, int, float], None]
Metric = Callable[[list[list[np.ndarray]], list[list[np.ndarray]]], float]


@dataclass
class QatResult:
    model: QatModel
    steps: int
    seconds: float
    losses: list[float] = field(default_factory=list)
    cosine_before: float = float("nan")
    cosine_after: float = float("nan")
    metric_before: float | None = None
    metric_after: float | None = None
    path: Path | None = None
    calibration: object | None = None
    world: int = 1


def checkpoint_path(cfg: HbConfig) -> Path:
    return Path(cfg.model.working_dir) / f"{cfg.model.output_model_file_prefix}_qat_checkpoint.pt"


def _optimizer(cfg: HbConfig, model: QatModel) -> torch.optim.Optimizer:
    q = cfg.qat
    params = [p for p in model.parameters() if p.requires_grad]
    if q.optimizer == "sgd":
        return torch.optim.SGD(params, lr=q.lr, momentum=0.9, weight_decay=q.weight_decay)
    cls = torch.optim.Adam if q.optimizer == "adam" else torch.optim.AdamW
    return cls(params, lr=q.lr, weight_decay=q.weight_decay)


def _to_torch(batch: dict[str, np.ndarray], names: Sequence[str], device: str) -> list[torch.Tensor]:
    return [torch.from_numpy(np.ascontiguousarray(batch[n])).to(device) for n in names]


def _stack(data, indices: Sequence[int]) -> dict[str, np.ndarray]:
    parts = [data.sample(int(i)) for i in indices]
    return {name: np.concatenate([p[name] for p in parts], axis=0) for name in data.input_names}


def _outputs(module, batch, names, device, chunk: int) -> list[list[np.ndarray]]:
    """Per output, per sample: the module's outputs on ``batch`` (no gradient), in chunks."""
    n = next(iter(batch.values())).shape[0]
    outs: list[list[np.ndarray]] | None = None
    with torch.no_grad():
        for start in range(0, n, chunk):
            part = {k: v[start:start + chunk] for k, v in batch.items()}
            ys = module(*_to_torch(part, names, device))
            if outs is None:
                outs = [[] for _ in ys]
            for k, y in enumerate(ys):
                outs[k].extend(np.asarray(y.detach().cpu().numpy()[i:i + 1]) for i in range(y.shape[0]))
    return outs or []


def output_cosine(student: list[list[np.ndarray]], teacher: list[list[np.ndarray]]) -> float:
    """Mean over outputs and samples of the cosine similarity to the float outputs."""
    vals = []
    for s_out, t_out in zip(student, teacher):
        for s, t in zip(s_out, t_out):
            a, b = s.astype(np.float64).ravel(), t.astype(np.float64).ravel()
            vals.append(float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-30)))
    return float(np.mean(vals)) if vals else float("nan")


class DistillLoss:
    """Sum over outputs (and distillation tensors) of ``mean((q - f)**2) / mean(f**2)``.

    The normaliser is measured once on the validation batch, so every process and every step
    uses the same constants and the loss of a shard is its exact share of the global loss."""

    def __init__(self, reference: Sequence[torch.Tensor]):
        self.norm = [float(max((r.double() ** 2).mean().item(), 1e-12)) for r in reference]

    def __call__(self, student: Sequence[torch.Tensor], teacher: Sequence[torch.Tensor], global_batch: int) -> torch.Tensor:
        total = 0.0
        for s, t, n in zip(student, teacher, self.norm):
            per_sample = ((s - t) ** 2).reshape(s.shape[0], -1).mean(dim=1) / n
            total = total + per_sample.sum() / global_batch
        return total


class KlDistillLoss:
    """Per-position KL divergence ``KL(softmax(f/T) || softmax(q/T)) * T**2`` over the last axis.

    Why, for classifiers and CTC recognisers: their decision is the argmax of each position's
    softmax, and a mean squared error on probabilities that are almost all 0 or 1 says little
    about the runner-up classes that flip a transcription; the KL divergence of the logits does
    (Hinton et al. 2015; ``T > 1`` weighs the runners-up more). Inputs are logits (the inputs of
    the model's final Softmax, see :func:`logit_tensors`). Averaged over the positions of a
    sample, summed over the global batch like :class:`DistillLoss`, so a shard's loss is its
    exact share. ``mse`` (normalised as :class:`DistillLoss`) is added for the extra tensors."""

    def __init__(self, temperature: float, n_logits: int, mse_reference: Sequence[torch.Tensor] = ()):
        self.t = float(temperature)
        self.n_logits = n_logits
        self.mse = DistillLoss(mse_reference)

    def __call__(self, student: Sequence[torch.Tensor], teacher: Sequence[torch.Tensor], global_batch: int) -> torch.Tensor:
        total = 0.0
        for s, f in zip(student[:self.n_logits], teacher[:self.n_logits]):
            log_q = torch.log_softmax(s / self.t, dim=-1)
            log_p = torch.log_softmax(f / self.t, dim=-1)
            kl = (log_p.exp() * (log_p - log_q)).sum(dim=-1).reshape(s.shape[0], -1).mean(dim=1)
            total = total + kl.sum() * (self.t ** 2) / global_batch
        if len(student) > self.n_logits:
            total = total + self.mse(student[self.n_logits:], teacher[self.n_logits:], global_batch)
        return total


def logit_tensors(graph) -> list[str]:
    """Per model output, the tensor whose softmax over the last axis it is: the input of a final
    Softmax over the last axis, else the output itself (already logits)."""
    producers = graph.producer_map()
    names = []
    for out in graph.outputs:
        node = producers.get(out)
        rank = len(graph.shape(out) or ())
        if node is not None and node.op_type == "Softmax" and rank and int(node.attr("axis", -1)) in (-1, rank - 1):
            names.append(node.inputs[0])
        else:
            names.append(out)
    return names


def lr_factor(schedule: str, step: int, total: int) -> float:
    """The learning rate multiplier of ``step`` (0-based): 1, or a 5% linear warm-up and cosine decay.
    A function of the step alone, so ``--resume`` and every process agree without scheduler state."""
    if schedule != "cosine" or total <= 1:
        return 1.0
    warm = max(1, round(0.05 * total))
    if step < warm:
        return (step + 1) / warm
    return 0.5 * (1.0 + math.cos(math.pi * (step - warm) / max(1, total - warm)))


class TeacherCache:
    """The float teacher's outputs per training sample, computed once (``budget`` bytes at most).

    Only without augmentation (the teacher's input is then a function of the sample index).
    Samples are seen again from the second epoch on; the teacher is then not run for them."""

    def __init__(self, teacher, budget: int = 1 << 30):
        self.teacher = teacher
        self.budget = budget
        self.used = 0
        self.store: dict[int, tuple[torch.Tensor, ...]] = {}

    def __call__(self, xs: Sequence[torch.Tensor], indices: Sequence[int], tensors: Sequence[str],
                 outputs: bool = True) -> tuple[torch.Tensor, ...]:
        keys = [int(i) for i in indices]
        missing = [k for k, i in enumerate(keys) if i not in self.store]
        if missing:
            with torch.no_grad():
                sel = torch.tensor(missing, dtype=torch.long, device=xs[0].device)
                ys = self.teacher(*[x.index_select(0, sel) for x in xs], tensors=tensors, outputs=outputs)
            fresh = {keys[k]: tuple(y[j:j + 1] for y in ys) for j, k in enumerate(missing)}
        else:
            fresh = {}
        for i, ys in fresh.items():
            size = sum(y.numel() * y.element_size() for y in ys)
            if self.used + size <= self.budget:
                self.store[i] = tuple(y.clone() for y in ys)
                self.used += size
        rows = [self.store.get(i) or fresh[i] for i in keys]
        return tuple(torch.cat([r[k] for r in rows], dim=0) for k in range(len(rows[0])))


def build_model(cfg: HbConfig, calibration) -> QatModel:
    source = getattr(calibration, "quantized_source", None) or calibration.graph   # bias corrections folded in
    return QatModel(source, calibration.plan, calibration.weight_scales, rounding=cfg.compiler.rounding,
                    per_channel=cfg.calibration.per_channel, train_scales=cfg.qat.train_scales)


def _split_samples(num_samples: int, val_samples: int) -> tuple[np.ndarray, np.ndarray]:
    """(training, validation) sample indices: the last ``val_samples`` are held out when there are
    more than twice as many samples; with fewer, validation uses the first ones, also trained on."""
    n_val = min(val_samples, num_samples)
    held_out = num_samples > 2 * n_val
    train_ids = np.arange(num_samples - n_val if held_out else num_samples)
    val_ids = np.arange(num_samples - n_val, num_samples) if held_out else np.arange(n_val)
    return train_ids, val_ids


def _cross_entropy(student: Sequence[torch.Tensor], labels: np.ndarray, batch_size: int, device) -> torch.Tensor:
    """``loss: ce``: the first output as logits against the labels, summed and divided by the global batch."""
    target = torch.from_numpy(labels).to(device)
    logits = student[0].reshape(student[0].shape[0], -1)
    return torch.nn.functional.cross_entropy(logits, target, reduction="sum") / batch_size


def _teacher_outputs(teacher, cached: TeacherCache | None, xs: Sequence[torch.Tensor], indices: np.ndarray,
                     tensors: Sequence[str], outputs: bool) -> tuple[torch.Tensor, ...]:
    """The float teacher's outputs for the batch, from the cache when there is one (no augmentation)."""
    if cached is not None:
        return cached(xs, indices, tensors, outputs)
    with torch.no_grad():
        return teacher(*xs, tensors=tensors, outputs=outputs)


def _summed_over_processes(value: float, info: DistInfo) -> float:
    """A step's loss summed over the data-parallel processes (each holds its shard's share)."""
    if not info.active:
        return value
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t)
    return float(t)


def _save_checkpoint(path: Path, model: QatModel, opt: torch.optim.Optimizer, step: int, losses: list[float]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step, "losses": losses}, path)


def _load_checkpoint(path: Path, model: QatModel, opt: torch.optim.Optimizer, device) -> tuple[int, list[float]]:
    """``--resume``: weights, scales and optimizer state back from ``path``; (the step it stopped at, the losses so far)."""
    if not path.exists():
        raise InputError(f"qat --resume: no checkpoint at {path}", "run hbtool qat without --resume first (checkpoint_every > 0 writes one)")
    state = torch.load(path, map_location=device, weights_only=False)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    return int(state["step"]), list(state.get("losses", []))


def run_qat(cfg: HbConfig, progress: Progress | None = None, resume: bool = False, metric: Metric | None = None,
            calibration=None, export: bool = True) -> QatResult:
    """Train the quantized model of ``cfg`` (module docstring); ``metric(outputs, float_outputs)`` is the user's score."""
    from hbtool.quant.calibrate import run_calibration

    t0 = time.perf_counter()
    q = cfg.qat
    device = resolve_device(q.device)
    info: DistInfo = init_distributed(device)
    if device == "cuda" and info.active:
        torch.cuda.set_device(info.local_rank)
    torch.manual_seed(q.seed)
    if calibration is None:
        calibration = run_calibration(cfg)
    model = build_model(cfg, calibration).to_device(device)
    teacher = FloatGraphModule(calibration.graph).to_device(device)
    names = list(calibration.graph.inputs)
    data = training_data(cfg, calibration.graph)
    labels = read_labels(q.labels, data.num_samples)
    if q.loss == "ce" and labels is None:
        raise InputError("qat_parameters.loss is ce but no labels are given", "set qat_parameters.labels, or use loss: distill")
    train_ids, val_ids = _split_samples(data.num_samples, q.val_samples)
    sampler = ShardSampler(train_ids.size, q.batch_size, info, q.seed)
    total = q.steps or q.epochs * sampler.steps_per_epoch
    image_inputs = {spec.name or names[0]: spec.layout_train or "NCHW" for spec in cfg.inputs if spec.is_image}
    logit_names = logit_tensors(calibration.graph) if q.loss == "kl" else []
    tensors = logit_names + list(q.distill_tensors)

    val_batch = _stack(data, val_ids)
    chunk = max(1, q.batch_size // info.world)
    ref = _outputs(teacher, val_batch, names, device, chunk)
    before = _outputs(model, val_batch, names, device, chunk)
    result = QatResult(model, total, 0.0, cosine_before=output_cosine(before, ref), calibration=calibration, world=info.world)
    if metric is not None:
        result.metric_before = float(metric(before, ref))
    with torch.no_grad():
        first = {k: v[:chunk] for k, v in val_batch.items()}
        reference = teacher(*_to_torch(first, names, device), tensors=tensors)
    loss_fn = KlDistillLoss(q.temperature, len(logit_names), reference[len(calibration.graph.outputs) + len(logit_names):]) \
        if q.loss == "kl" else DistillLoss(reference)
    cached_teacher = TeacherCache(teacher) if not q.augment else None
    opt = _optimizer(cfg, model)
    start = 0
    ckpt = checkpoint_path(cfg)
    if resume:
        start, result.losses = _load_checkpoint(ckpt, model, opt, device)
    model.train()
    trained = data_parallel(model, info, device)
    for step in range(start, total):
        local = train_ids[sampler.local_indices(step)]
        batch = augment(_stack(data, local), image_inputs, q.augment, q.seed, step, local)
        xs = _to_torch(batch, names, device)
        student = trained(*xs, tensors=tensors, outputs=q.loss != "kl")  # kl: the logits (and distill tensors) only
        if q.loss == "ce":
            loss = _cross_entropy(student, labels[local], q.batch_size, device)
        else:
            loss = loss_fn(student, _teacher_outputs(teacher, cached_teacher, xs, local, tensors, q.loss != "kl"), q.batch_size)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # under DDP: gradients summed over the processes
        for group in opt.param_groups:
            group["lr"] = q.lr * lr_factor(q.lr_schedule, step, total)
        opt.step()
        value = _summed_over_processes(float(loss.detach()), info)
        result.losses.append(value)
        if progress:
            progress(step + 1, total, value)
        if q.checkpoint_every and (step + 1) % q.checkpoint_every == 0 and info.is_main:
            _save_checkpoint(ckpt, model, opt, step + 1, result.losses)
    if info.is_main and total > start:
        _save_checkpoint(ckpt, model, opt, total, result.losses)
    model.eval()
    after = _outputs(model, val_batch, names, device, chunk)
    result.cosine_after = output_cosine(after, ref)
    if metric is not None:
        result.metric_after = float(metric(after, ref))
    if export and info.is_main:
        result.path = export_qat_model(model, qat_model_path(cfg), {
            "steps": total, "lr": q.lr, "batch_size": q.batch_size, "loss": q.loss, "train_scales": q.train_scales,
            "cosine_before": result.cosine_before, "cosine_after": result.cosine_after, "world": info.world})
    barrier(info)
    result.seconds = time.perf_counter() - t0
    return result
