"""Data-parallel QAT over processes, GPUs or machines with ``torch.distributed``.

Launch with ``torchrun --nproc_per_node N -m hbtool.cli qat -c cfg.yaml`` (or any launcher
that sets ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT``). Backends: gloo on CPU,
nccl on GPU. Every process builds the same model from the same PTQ result; each step, the
global batch (``batch_size`` samples, the same indices a one-process run takes) is split
into equal contiguous shards, each process computes the gradient of its shard's share of the
global mean loss, and torch's ``DistributedDataParallel`` sums the gradients (bucketed, and
overlapped with the backward pass): the same update as one process on the whole batch up to
float summation order.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch

from hbtool.errors import InputError


@dataclass
class DistInfo:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def active(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device: str) -> DistInfo:
    """Join the process group the launcher describes (a one-process run when there is none)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device == "cuda" else "gloo")
    return DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def _sum_gradients_hook(process_group, bucket):
    """DDP's gradient communication, summing instead of DDP's default mean.

    Each process's loss is already its shard's share of the global mean (``loss / batch_size``
    over the global batch), so the sum is the one-process gradient; DDP's mean would divide it
    by the number of processes a second time.
    """
    import torch.distributed as dist

    work = dist.all_reduce(bucket.buffer(), op=dist.ReduceOp.SUM, group=process_group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def data_parallel(model: torch.nn.Module, info: DistInfo, device: str) -> torch.nn.Module:
    """The module to run training steps through: ``model`` itself alone, wrapped in DDP in a process group.

    Parameters stay those of ``model`` (checkpoints, export and evaluation read it directly).
    ``find_unused_parameters``: a loss on the logits alone (``loss: kl``) leaves the layers
    after them without a gradient; globally unused parameters keep no gradient, as before, so
    the optimizer skips them. Buffers are not broadcast: every process builds them identically.
    """
    if not info.active:
        return model
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(model, device_ids=[info.local_rank] if device == "cuda" else None,
                                  broadcast_buffers=False, find_unused_parameters=True)
    ddp.register_comm_hook(None, _sum_gradients_hook)
    return ddp


def barrier(info: DistInfo) -> None:
    if info.active:
        import torch.distributed as dist

        dist.barrier()


def resolve_device(requested: str) -> str:
    """``cpu`` / ``cuda`` / ``auto``; cuda without a GPU is an error, not a silent CPU run."""
    if requested == "cuda" and not torch.cuda.is_available():
        raise InputError("qat_parameters.device is cuda but torch sees no CUDA device",
                         "set device: cpu (or auto), or run on a machine with a GPU and a CUDA build of torch")
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


class ShardSampler:
    """The sample indices of every step: global batches from seeded per-epoch permutations, sharded by rank.

    Step ``k`` of every run (any world size, resumed or not) reads the same global batch, so
    a run is reproducible and a resumed run continues the same sequence.
    """

    def __init__(self, num_samples: int, global_batch: int, info: DistInfo, seed: int = 0):
        if num_samples < 1:
            raise InputError("qat: the training data holds no samples", "put samples in qat_parameters.train_data_dir")
        if global_batch % info.world:
            raise InputError(f"qat_parameters.batch_size {global_batch} does not split over {info.world} processes",
                             f"use a batch_size divisible by {info.world}")
        self.n = num_samples
        self.batch = global_batch
        self.info = info
        self.seed = seed
        self.steps_per_epoch = max(1, num_samples // global_batch)

    def _perm(self, epoch: int) -> np.ndarray:
        perm = np.random.default_rng([self.seed, epoch]).permutation(self.n)
        if self.n < self.batch:  # fewer samples than a batch: repeat the permutation
            perm = np.tile(perm, -(-self.batch // self.n))
        return perm

    def global_indices(self, step: int) -> np.ndarray:
        epoch, j = divmod(step, self.steps_per_epoch)
        return self._perm(epoch)[j * self.batch:(j + 1) * self.batch]

    def local_indices(self, step: int) -> np.ndarray:
        share = self.batch // self.info.world
        return self.global_indices(step)[self.info.rank * share:(self.info.rank + 1) * share]
