"""Data parallelism over ``torch.distributed`` (launched by ``torchrun`` or ``accelerate launch``).

Each process encodes its share of the global batch; the SPLADE vectors are gathered *with their
gradient* (:func:`gather_with_grad`) so that the ranking loss (in-batch negatives over the global
batch) and the FLOPS regulariser are computed on the global batch by every process. The backward
of the gather sums the gradients of all processes and keeps the own slice; the parameter gradients
are then averaged over processes (:func:`average_gradients`). Together this gives exactly the
gradient of the global-batch loss, whatever the number of processes.

Joining the process group is :func:`spladekit.distributed.init_distributed` (shared with the
data-parallel index build); it is re-exported here.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from spladekit.distributed import DistInfo, barrier, init_distributed  # noqa: F401  (the one set-up, re-exported)


def _active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


class _GatherWithGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        world = dist.get_world_size()
        sizes = [torch.zeros(1, dtype=torch.long, device=tensor.device) for _ in range(world)]
        dist.all_gather(sizes, torch.tensor([tensor.shape[0]], device=tensor.device))
        sizes = [int(s) for s in sizes]
        if len(set(sizes)) != 1:
            raise ValueError(f"gather_with_grad needs equal shares per process, got {sizes}")
        parts = [torch.empty_like(tensor) for _ in range(world)]
        dist.all_gather(parts, tensor.contiguous())
        ctx.rank, ctx.size = dist.get_rank(), tensor.shape[0]
        return torch.cat(parts, dim=0)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        return grad[ctx.rank * ctx.size : (ctx.rank + 1) * ctx.size]


def gather_with_grad(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate ``tensor`` ``[n, ...]`` of every process in rank order: ``[world·n, ...]``.

    Differentiable: the backward sums the incoming gradients over processes and returns this
    process's slice. With one process it returns ``tensor`` unchanged.
    """
    if not _active():
        return tensor
    return _GatherWithGrad.apply(tensor)


def average_gradients(parameters) -> None:
    """All-reduce (mean over processes) the gradients of ``parameters``, in one flat buffer."""
    if not _active():
        return
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat /= dist.get_world_size()
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset : offset + n].view_as(g))
        offset += n


def broadcast_parameters(module: torch.nn.Module) -> None:
    """Copy rank 0's parameters and buffers to every process."""
    if not _active():
        return
    for tensor in list(module.parameters()) + list(module.buffers()):
        dist.broadcast(tensor.data, src=0)


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` summed over processes, in place (returned); ``tensor`` itself with one process."""
    if _active():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def broadcast_flag(flag: bool, device: torch.device) -> bool:
    """Rank 0's ``flag`` on every process (e.g. the early-stopping decision); ``flag`` itself with one process."""
    if not _active():
        return flag
    tensor = torch.tensor([1 if flag else 0], device=device)
    dist.broadcast(tensor, src=0)
    return bool(tensor.item())
