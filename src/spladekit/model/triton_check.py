"""First-use check of the fused head's Triton kernel: once per process and device, against chunked torch.

On CUDA the fused head's default backend (``"auto"``) is the Triton kernel of
:mod:`spladekit.model.triton_head`. Before the kernel's first use on a device (and, separately, for
each input dtype, and again the first time gradients are wanted), :func:`kernel_verified` runs it on
a small batch of the real inputs (the first :data:`CHECK_ROWS` rows of the call) and compares it with
the chunked torch path (:func:`spladekit.model.fused._torch_masked_max`) on the same device:

- forward: the masked max ``m`` ``[b, V]`` of both, within the bound below (and ``-inf`` at the
  same entries: rows without real tokens);
- gradients (training, i.e. when the argmax is asked for): the backward is torch code shared by
  both paths (:func:`spladekit.model.fused.sparse_head_backward`) whose only inputs from the kernel
  are ``m`` and the position ``t*`` of each max, so the kernel's gradients are right when each
  active entry's ``t*`` is a real position whose logit reaches the max within the bound (a tie may
  go to another position than torch's: both are right). Where a position is wrong, the warning
  gives the resulting gradient difference of the hidden states.

On a mismatch (or an exception from the kernel) it warns once (``RuntimeWarning``, naming the
device, the dtype and the difference) and the head uses the torch path on that device from then on,
for every dtype. ``SPLADEKIT_TRITON_CHECK=0`` turns the check off (the kernel is then used
unchecked); ``SPLADEKIT_NO_TRITON=1`` keeps the kernel off altogether.

The device is where the kernel runs: a CUDA device (key ``cuda:N``, named by
``torch.cuda.get_device_name``) or, under ``TRITON_INTERPRET=1``, the CPU (Triton's interpreter,
key ``cpu``), so the CPU tests exercise the same code as a GPU.

Bound (forward), for each entry ``(b, j)``. The exact logits are ``z_t = Σ_h h_th W_jh + b_j``
and ``M = max_t z_t`` over the real positions. If a path computes each ``z_t`` with an error at
most ``e_t``, its max is within ``max_t e_t`` of ``M`` (a max of perturbed values moves by at most
the largest perturbation). A dot product of ``n`` terms summed in floating point with unit
roundoff ``u`` in any order has an error at most ``γ_n · S_t``, ``γ_n = n·u / (1 − n·u)`` and
``S_t = Σ_h |h_th W_jh| + |b_j|`` (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed.,
eq. 3.5 and §3.1), so with ``S = max_t S_t``:

- kernel: float32 inputs are multiplied in IEEE float32 (``input_precision="ieee"``) and bf16/fp16
  products are exact in float32 (8- or 11-bit significands: a product has at most 22 bits < 24);
  all is accumulated in float32: ``e ≤ γ_{H+1}(2⁻²⁴) · S``;
- chunked torch: float32 ``F.linear`` with IEEE products, the same bound; when TF32 is allowed
  (``torch.backends.cuda.matmul.allow_tf32``) the inputs are first rounded to TF32's 10-bit
  significand, adding at most ``2 · 2⁻¹¹ · S`` (both factors rounded, relative ``2⁻¹¹`` each).
  bf16/fp16 outputs are rounded to the dtype (``u_d`` = 2⁻⁸ or 2⁻¹¹), and cuBLAS may sum split-K
  partial sums in that dtype (``allow_bf16/fp16_reduced_precision_reduction``): allowing up to 3 such
  roundings of partial sums below ``S``, ``e ≤ γ_{H+1}(2⁻²⁴) · S + 4 · u_d · S``.

The bound is the sum of the two paths' errors, doubled (:data:`SAFETY`) for the float32 rounding of
``S`` itself and of the comparison, plus the smallest normal float32 (``S = 0``). A wrong kernel (a
tile edge, a stride, a mask) errs by a sizeable fraction of ``S``, far above it: at H = 768 the bound
is ``4 γ_769(2⁻²⁴) S ≈ 1.8·10⁻⁴ S`` in float32 and ``≈ 0.031 S`` in bf16. The same bound holds for the logit at the kernel's ``t*``, recomputed
here in float32 (one more ``γ_{H+1}(2⁻²⁴) · S``).
"""

from __future__ import annotations

import os
import threading
import warnings

import torch

#: Rows of the real batch the check runs on (the first ones).
CHECK_ROWS = 4
#: Entries whose position is checked per gather step (bounds the ``[n, H]`` buffers).
CHECK_CHUNK = 1 << 16
#: Factor on the derived bound (rounding of ``S`` and of the comparison itself, see the module docstring).
SAFETY = 2.0

_LOCK = threading.Lock()
_FAILED: dict[str, str] = {}  # device key -> the warning's text
_PASSED: set[tuple[str, torch.dtype, bool]] = set()  # (device key, dtype, gradients checked)


def check_enabled() -> bool:
    """Whether the first-use check runs (``SPLADEKIT_TRITON_CHECK`` unset or not ``0``/``false``/``off``)."""
    return os.environ.get("SPLADEKIT_TRITON_CHECK", "1").strip().lower() not in ("0", "false", "off", "no")


def device_key(device: torch.device) -> str:
    """The key of a device in the check's records: ``cuda:N`` (index filled in) or ``cpu``."""
    if device.type == "cuda":
        return f"cuda:{device.index if device.index is not None else torch.cuda.current_device()}"
    return str(device)


def device_name(device: torch.device) -> str:
    """Words for the device in the warning: the GPU's name, or the CPU under Triton's interpreter."""
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} ({device_key(device)})"
    return f"{device_key(device)} (Triton interpreter)"


def reset() -> None:
    """Forget every verdict (tests; a process otherwise keeps them for its lifetime)."""
    with _LOCK:
        _FAILED.clear()
        _PASSED.clear()


def _unit_roundoff(dtype: torch.dtype) -> float:
    return {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}.get(dtype, 2.0**-24)


def logit_bound(dtype: torch.dtype, dim: int, device: torch.device) -> float:
    """Factor ``c`` with ``|m_kernel − m_torch| ≤ c · S`` (module docstring, "Bound"), ``dim`` = H."""
    u32 = 2.0**-24
    n = dim + 1  # H products and the bias
    gamma = n * u32 / (1 - n * u32)
    e_kernel = gamma  # float32 accumulation of exact (bf16/fp16) or IEEE-rounded (float32) products
    e_torch = gamma
    if dtype == torch.float32:
        if device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32:
            e_torch += 2 * 2.0**-11  # both factors rounded to TF32
    else:
        e_torch += 4 * _unit_roundoff(dtype)  # the output's rounding and up to 3 reduced-precision partial sums
    return SAFETY * (e_kernel + e_torch)


def kernel_verified(
    hidden: torch.Tensor,
    attention_mask: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    with_grad: bool,
    reference,
    backward,
) -> bool:
    """Whether the Triton kernel may be used for this call (checking it first when not yet done).

    Args:
        hidden: ``[B, L, H]``; attention_mask ``[B, L]``; weight ``[V, H]``; bias ``[V]`` or None: the
            call's own inputs (one dtype, on the kernel's device).
        with_grad: the call is for training (the argmax feeds the backward): check the positions too.
        reference: the chunked torch path, :func:`spladekit.model.fused._torch_masked_max`, and
        backward: :func:`spladekit.model.fused.sparse_head_backward` (passed in by the fused head,
            which imports this module: no import back).

    Returns:
        False when the kernel failed a check on this device (now or earlier): use the torch path.
        Warns (``RuntimeWarning``) once per device, when it fails.
    """
    if not check_enabled():
        return True
    key = device_key(hidden.device)
    with _LOCK:
        if key in _FAILED:
            return False
        if (key, hidden.dtype, with_grad) in _PASSED or (key, hidden.dtype, True) in _PASSED:
            return True
        problem = _compare(hidden, attention_mask, weight, bias, with_grad, reference, backward)
        if problem is None:
            _PASSED.add((key, hidden.dtype, with_grad))
            return True
        message = (
            f"fused SPLADE head: the Triton kernel disagrees with the chunked-torch path on "
            f"{device_name(hidden.device)}, dtype {str(hidden.dtype).removeprefix('torch.')}: {problem}; "
            "using the chunked-torch path on this device from now on (SPLADEKIT_TRITON_CHECK=0 skips "
            "this check, SPLADEKIT_NO_TRITON=1 never uses the kernel)"
        )
        _FAILED[key] = message
    warnings.warn(message, RuntimeWarning, stacklevel=2)
    return False


@torch.no_grad()
def _compare(hidden, attention_mask, weight, bias, with_grad: bool, reference, backward) -> str | None:
    """The check itself on the first :data:`CHECK_ROWS` rows: None when the kernel agrees, else what differs."""
    from spladekit.model.triton_head import triton_masked_max

    h = hidden[:CHECK_ROWS].contiguous()
    mask = attention_mask[:CHECK_ROWS].contiguous()
    try:
        m_k, t_k = triton_masked_max(h, mask, weight, bias, with_argmax=with_grad)
    except Exception as error:  # a GPU or dtype the kernel cannot compile for
        return f"the kernel failed ({error!r})"
    m_t, t_t = reference(h, mask, weight, bias, with_grad)
    scale, _ = reference(
        h.abs().float(), mask, weight.abs().float(), None if bias is None else bias.abs().float(), False
    )  # S = max_t S_t
    factor = logit_bound(hidden.dtype, hidden.shape[2], hidden.device)
    finite = torch.isfinite(m_t)
    if not torch.equal(finite, torch.isfinite(m_k)):
        return "rows without real tokens differ (-inf in one path only)"
    tol = (
        torch.where(finite, factor * scale, torch.zeros_like(scale)) + torch.finfo(torch.float32).tiny
    )  # S = -inf: no token
    diff = torch.where(finite, (m_k - m_t).abs(), torch.zeros_like(m_t))
    excess = finite & ~(diff <= tol)  # NaN counts as over
    if bool(excess.any()) or not bool(torch.isfinite(m_k[finite]).all()):
        worst = torch.argmax(torch.where(finite, diff / tol, torch.zeros_like(diff)).flatten())
        b, j = divmod(int(worst), m_t.shape[1])
        return (
            f"forward max |Δm| = {float(diff.max()):.3g} ({int(excess.sum())} of {int(finite.sum())} entries "
            f"over the bound; worst at row {b}, column {j}: kernel {float(m_k[b, j]):.6g}, "
            f"torch {float(m_t[b, j]):.6g}, bound {float(tol[b, j]):.3g})"
        )
    if not with_grad:
        return None
    # positions: where the two paths pick another t*, the kernel's must be real and reach the max
    active = (m_t > 0) | (m_k > 0)
    rows, cols = torch.nonzero(active & (t_k != t_t), as_tuple=True)
    length = h.shape[1]
    wrong = 0
    for lo in range(0, rows.numel(), CHECK_CHUNK):
        r, c = rows[lo : lo + CHECK_CHUNK], cols[lo : lo + CHECK_CHUNK]
        t = t_k[r, c].long()
        inside = (t >= 0) & (t < length)
        t = t.clamp(0, length - 1)
        real = inside & mask[r, t].to(torch.bool)
        logit = (h[r, t].float() * weight[c].float()).sum(-1) + (0.0 if bias is None else bias[c].float())
        reaches = logit >= m_t[r, c] - (tol[r, c] + factor / SAFETY * scale[r, c])
        wrong += int((~(real & reaches)).sum())
    if wrong == 0:
        return None
    ones = torch.ones_like(m_t)
    need = (True, False, False)
    d_k = backward(ones, m_t, t_k.clamp(0, length - 1), h, weight, need)[0]  # a position past L: the last
    d_t = backward(ones, m_t, t_t, h, weight, need)[0]
    gap = float((d_k - d_t).abs().max())
    return (
        f"gradients: {wrong} of {int(active.sum())} active entries take their gradient at a position that is "
        f"not a maximum (max |Δ d hidden| = {gap:.3g} for a unit gradient, against max "
        f"|d hidden| = {float(d_t.abs().max()):.3g})"
    )
