"""The one distributed set-up (``torch.distributed``, launched by ``torchrun`` or ``accelerate launch``),
used by training (:mod:`spladekit.train.distributed`) and the data-parallel index build
(:class:`spladekit.index.index.Index`).

NCCL with CUDA, gloo otherwise; a single process (no ``WORLD_SIZE`` > 1) gets rank 0 of 1 and no
process group.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass
class DistInfo:
    """Rank, world size, local rank, and whether this process initialised the process group."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    owns_group: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def device(self) -> str | None:
        """``cuda:<local rank mod #GPUs>`` when CUDA is available and several processes run, else
        None (the caller's default device)."""
        if self.world_size <= 1:
            return None
        import torch

        if not torch.cuda.is_available():
            return None
        return f"cuda:{self.local_rank % torch.cuda.device_count()}"

    def close(self) -> None:
        """Destroy the process group when this process created it."""
        if self.owns_group:
            import torch.distributed as dist

            dist.destroy_process_group()
            self.owns_group = False


def init_distributed(device_type: str | None = None) -> DistInfo:
    """Join the process group described by the launcher's environment (``WORLD_SIZE`` > 1).

    Args:
        device_type: ``"cuda"`` for NCCL, anything else for gloo; None: NCCL when CUDA is available.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)))
    if world <= 1:
        return DistInfo()
    import torch

    use_cuda = torch.cuda.is_available() if device_type is None else device_type == "cuda"
    dist.init_process_group("nccl" if use_cuda else "gloo")
    return DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)), owns_group=True)


def barrier() -> None:
    """Wait for every process (no-op with one process)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()
