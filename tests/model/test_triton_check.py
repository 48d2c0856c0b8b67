"""The first-use check of the Triton kernel (spladekit.model.triton_check), in Triton's CPU interpreter.

The check runs where the kernel runs: under ``TRITON_INTERPRET=1`` the fused head's ``"auto"``
backend runs the kernel on CPU tensors, through the same code (device key, check, fall-back) as on
CUDA. A kernel made wrong on purpose (a copy of the real one's source with one line changed) must
be caught with one warning naming the device, the dtype and the difference, after which the torch
path is used; the right kernel must pass in silence and keep being used, checked only once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

_SCRIPT = textwrap.dedent(
    """
    import importlib.util, inspect, json, sys, warnings
    from pathlib import Path

    import torch

    import spladekit.model.triton_check as tc
    import spladekit.model.triton_head as th
    from spladekit.model.fused import fused_splade_head

    RIGHT = th._splade_max_kernel
    # one line changed each: the last 16-wide tile of the hidden size is skipped (every value wrong),
    # or each max is put one position later (values right, gradients at the wrong token)
    EDITS = {
        "forward": ("for h0 in range(0, H, BLOCK_H):", "for h0 in range(0, H - BLOCK_H, BLOCK_H):"),
        "argmax": ("tie_break_left=True).to(tl.int32) + l0", "tie_break_left=True).to(tl.int32) + l0 + 1"),
    }
    source = inspect.getsource(th)
    KERNELS = {"right": RIGHT}
    for name, (old, new) in EDITS.items():
        assert source.count(old) == 1, old
        path = Path(sys.argv[1]) / f"wrong_{name}.py"
        path.write_text(source.replace(old, new))  # triton.jit reads the kernel's source from its file
        spec = importlib.util.spec_from_file_location(f"wrong_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        KERNELS[name] = module._splade_max_kernel

    calls = []
    kernel_fn = th.triton_masked_max
    def counted(*args, **kwargs):
        calls.append(args[0].shape[0])  # rows of the call: the check's small batch or the whole one
        return kernel_fn(*args, **kwargs)
    th.triton_masked_max = counted

    gen = torch.Generator().manual_seed(0)
    B, L, H, V = 6, 19, 20, 37  # B > CHECK_ROWS: the check runs on the first rows only
    h = torch.randn(B, L, H, generator=gen)
    w = torch.randn(V, H, generator=gen)
    b = torch.randn(V, generator=gen)
    m = torch.ones(B, L, dtype=torch.long)
    m[1, 10:] = 0; m[2, :] = 0; m[3, :5] = 0; m[5, 7:9] = 0
    g = torch.rand(B, V, generator=gen)

    def head(backend, grad, dtype=torch.float32):
        hh, ww, bb = (t.to(dtype).clone().requires_grad_(grad) for t in (h, w, b))
        with torch.set_grad_enabled(grad):
            out = fused_splade_head(hh, m, ww, bb, backend=backend)
        if not grad:
            return [out]
        (out * g).sum().backward()
        return [out.detach(), hh.grad, ww.grad, bb.grad]

    def equal(a, reference):  # same code path on the same inputs: bit for bit
        try:
            return all(torch.equal(x, y) for x, y in zip(a, reference()))
        except RuntimeError:  # the wrong-position kernel's own backward indexes past L
            return False

    report = {}
    for scenario in sys.argv[2:]:
        kernel, _, mode = scenario.partition(":")
        tc.reset()
        th._splade_max_kernel = KERNELS[kernel]
        calls.clear()
        steps = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for grad, dtype in ((False, torch.float32), (False, torch.float32), (True, torch.float32),
                                (True, torch.float32), (False, torch.bfloat16)):
                before = len(calls)
                out = head("auto", grad, dtype)
                steps.append({"grad": grad, "dtype": str(dtype), "kernel_calls": calls[before:],
                              "equals_kernel": equal(out, lambda: head("triton", grad, dtype)),
                              "equals_torch": equal(out, lambda: head("torch", grad, dtype))})
                del calls[before + len(steps[-1]["kernel_calls"]):]  # the references' own calls
        report[scenario] = {"steps": steps, "warnings": [str(w.message) for w in caught],
                            "categories": [w.category.__name__ for w in caught]}
    print("REPORT " + json.dumps(report))
    """
)


def _run(tmp_path, scenarios, **env):
    pytest.importorskip("triton", reason="triton is not installed: the Triton kernel cannot be checked")
    script = tmp_path / "check_script.py"
    script.write_text(_SCRIPT)
    environ = dict(
        os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])
    )
    environ.pop("SPLADEKIT_NO_TRITON", None)
    environ.pop("SPLADEKIT_TRITON_CHECK", None)
    environ.update(env)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path), *scenarios],
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("REPORT "))
    return json.loads(line[len("REPORT ") :])


@pytest.mark.slow
def test_first_use_check_catches_wrong_kernels_and_passes_the_right_one(tmp_path):
    report = _run(tmp_path, ["right", "forward", "argmax"])

    # the right kernel: nothing said; checked once per (device, dtype, gradients) on the first 4 rows
    # (a call of 4 rows), then used for every call of 6 rows, its outputs those of the kernel itself
    right = report["right"]
    assert right["warnings"] == [], right["warnings"]
    assert [s["kernel_calls"] for s in right["steps"]] == [[4, 6], [6], [4, 6], [6], [4, 6]]
    assert all(s["equals_kernel"] for s in right["steps"])

    # values wrong: caught at the first call, one warning naming device, dtype and the difference;
    # from then on the torch path for every call and dtype, the kernel never called again
    forward = report["forward"]
    assert forward["categories"] == ["RuntimeWarning"], forward["warnings"]
    message = forward["warnings"][0]
    assert "cpu (Triton interpreter)" in message and "dtype float32" in message and "forward max |Δm|" in message
    assert "SPLADEKIT_TRITON_CHECK=0" in message
    assert [s["kernel_calls"] for s in forward["steps"]] == [[4], [], [], [], []]
    assert all(s["equals_torch"] and not s["equals_kernel"] for s in forward["steps"])

    # positions wrong, values right: inference passes (its forward is right), training is caught
    argmax = report["argmax"]
    assert [s["kernel_calls"] for s in argmax["steps"]] == [[4, 6], [6], [4], [], []]
    assert argmax["steps"][0]["equals_kernel"] and argmax["steps"][1]["equals_kernel"]
    assert all(s["equals_torch"] for s in argmax["steps"][2:])
    assert len(argmax["warnings"]) == 1 and "gradients:" in argmax["warnings"][0], argmax["warnings"]
    assert "not a maximum" in argmax["warnings"][0] and "dtype float32" in argmax["warnings"][0]


@pytest.mark.slow
def test_first_use_check_can_be_turned_off(tmp_path):
    report = _run(tmp_path, ["forward"], SPLADEKIT_TRITON_CHECK="0")["forward"]
    assert report["warnings"] == []  # unchecked: the wrong kernel is used, as asked
    assert [s["kernel_calls"] for s in report["steps"]] == [[6]] * 5
    assert all(s["equals_kernel"] and not s["equals_torch"] for s in report["steps"])


def test_first_use_check_on_cuda_passes_the_real_kernel_in_silence():
    """On a GPU (the GPU machine; skipped here): the shipped kernel passes its check for float32 and
    bf16, forward and gradients, without a word, and is then the path used (verdicts recorded)."""
    import warnings

    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device (run on the GPU machine)")
    pytest.importorskip("triton", reason="triton is not installed")
    import spladekit.model.triton_check as tc
    from spladekit.model.fused import fused_splade_head

    tc.reset()
    gen = torch.Generator().manual_seed(0)
    h, w, b = (
        torch.randn(6, 70, 96, generator=gen),
        torch.randn(1000, 96, generator=gen),
        torch.randn(1000, generator=gen),
    )
    m = torch.ones(6, 70, dtype=torch.long)
    m[1, 40:] = 0
    m[2, :] = 0
    m[3, :9] = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for dtype in (torch.float32, torch.bfloat16):
            hh, ww, bb = (t.to("cuda", dtype).requires_grad_(True) for t in (h, w, b))
            with torch.no_grad():
                fused_splade_head(hh, m.cuda(), ww, bb)
            fused_splade_head(hh, m.cuda(), ww, bb).sum().backward()
    key = tc.device_key(torch.device("cuda"))
    assert {(key, torch.float32, True), (key, torch.bfloat16, True)} <= tc._PASSED and key not in tc._FAILED
