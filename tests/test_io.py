"""A killed run's temporary sibling (``.NAME.PID-XXXX.tmp``) is named by the next run that writes the
same output, and left as it is; a live writer's is not named. The killed run is a real process
ended by SIGKILL inside :func:`spladekit.io.atomic_folder` / :func:`spladekit.io.atomic_write`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from spladekit.io import atomic_folder, atomic_write, warn_stale_temporaries, write_json

SRC = Path(__file__).resolve().parents[1] / "src"

_WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from spladekit.io import atomic_folder, atomic_write
    out, kind = Path(sys.argv[1]), sys.argv[2]
    if kind == "folder":
        with atomic_folder(out) as tmp:
            (tmp / "part.txt").write_text("half of a long computation")
            print(tmp, flush=True)
            time.sleep(600)
    else:
        with atomic_write(out) as handle:
            handle.write("half")
            handle.flush()
            print("writing", flush=True)
            time.sleep(600)
    """
)


def _start_writer(out: Path, kind: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(out), kind], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline(), "the writer did not start"
    return proc


def _temporaries(out: Path) -> list[Path]:
    return sorted(p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.") and p.name.endswith(".tmp"))


def _kill(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)  # what a killed run gets: no cleanup at all
    proc.wait(timeout=30)
    proc.stdout.close()


@pytest.mark.parametrize("kind", ["folder", "file"])
def test_killed_run_leftover_is_named_and_kept(tmp_path, kind):
    out = tmp_path / ("index" if kind == "folder" else "metrics.json")
    proc = _start_writer(out, kind)
    (live,) = _temporaries(out)
    assert str(proc.pid) in live.name
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a live writer's temporary is not named
        assert warn_stale_temporaries(out) == []
    _kill(proc)
    assert _temporaries(out) == [live]  # SIGKILL leaves it behind

    with pytest.warns(RuntimeWarning) as caught:
        if kind == "folder":
            with atomic_folder(out) as tmp:
                (tmp / "part.txt").write_text("complete")
        else:
            write_json(out, {"complete": True})
    messages = [str(w.message) for w in caught if str(live) in str(w.message)]
    assert len(messages) == 1, [str(w.message) for w in caught]
    assert f"process {proc.pid}, no longer running" in messages[0] and "left as it is" in messages[0]
    assert live.exists()  # never deleted in silence (nor at all: the user decides)
    if kind == "folder":
        assert (live / "part.txt").read_text() == "half of a long computation"
        assert (out / "part.txt").read_text() == "complete"
    else:
        assert live.read_text() == "half" and out.read_text().strip().startswith("{")

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # named once per process, not at every write
        if kind == "folder":
            with atomic_folder(out) as tmp:
                (tmp / "part.txt").write_text("again")
        else:
            with atomic_write(out) as handle:
                handle.write("again")
    assert _temporaries(out) == [live]  # the new writes left nothing of their own


def test_an_empty_leftover_folder_of_a_dead_run_is_removed_without_a_word(tmp_path):
    out = tmp_path / "index"
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    empty, full = tmp_path / f".index.{proc.stdout.strip()}-abc.tmp", tmp_path / f".index.{proc.stdout.strip()}-def.tmp"
    empty.mkdir()
    full.mkdir()
    (full / "rows.npy").write_text("x")
    with pytest.warns(RuntimeWarning) as caught:
        assert warn_stale_temporaries(out) == [full]
    assert not empty.exists() and (full / "rows.npy").exists()  # the full one is named and kept
    assert [str(full) in str(w.message) for w in caught] == [True]


def test_old_style_name_counts_as_left_over(tmp_path):
    out = tmp_path / "run.trec"
    old = tmp_path / ".run.trec.k2j4d9xq.tmp"  # the name before the PID was part of it
    old.write_text("x")
    with pytest.warns(RuntimeWarning, match="an earlier version"):
        assert warn_stale_temporaries(out) == [old]
    assert old.exists()


def test_partial_checkpoint_of_a_killed_run_is_named_before_it_is_rewritten(tmp_path):
    from spladekit.train import train
    from tests.train_helpers import make_examples, make_tiny_model, tiny_config

    cfg = tiny_config(make_tiny_model(tmp_path / "model"), steps=2, checkpoint_every=2)
    out = tmp_path / "out"
    partial = out / "checkpoints" / ".tmp-step-0000002"  # what a kill during save_checkpoint leaves
    partial.mkdir(parents=True)
    (partial / "trainer.pt").write_bytes(b"\x80\x02 cut short")
    with pytest.warns(RuntimeWarning, match=r"\.tmp-step-0000002: a partial checkpoint of step 2 left by a run"):
        train(cfg, out, examples=make_examples(), show_progress=False)
    assert not partial.exists()  # said, then rewritten: the step's complete checkpoint replaces it
    import torch

    assert torch.load(out / "checkpoints" / "step-0000002" / "trainer.pt", weights_only=False)["step"] == 2


def test_an_export_killed_inside_its_graph_stage_is_named_by_the_next_export(tmp_path):
    """`spladekit export-model` SIGKILLed right after torch.onnx.export wrote the graph: the graph's
    temporary folder sits beside --out (a temporary of export-model's own temporary, ``..out.*.tmp``).
    The next export names each leftover beside --out that is not empty, removes the empty ones, and
    succeeds; nothing hidden is left unnamed."""
    from tests.train_helpers import make_tiny_model

    model = make_tiny_model(tmp_path / "model")
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(SRC))
    driver = [
        sys.executable,
        str(Path(__file__).resolve().parent / "signal_driver.py"),
        "torch.onnx:export",
        "1",
        "after",
        "SIGKILL",
        "--",
    ]
    killed = subprocess.run(
        [*driver, "export-model", "--model", str(model), "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    left = sorted(p for p in tmp_path.iterdir() if p.name.startswith("."))
    assert any(p.name.startswith("..out.") and (p / "model.onnx").is_file() for p in left), left
    holding = [p for p in left if any(p.iterdir())]
    again = subprocess.run(
        [sys.executable, "-m", "spladekit", "export-model", "--model", str(model), "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert again.returncode == 0 and (out / "model.onnx").is_file(), again.stderr[-2000:]
    for item in left:  # each kept one named (with the command that removes it); only empty ones removed
        if item.exists():
            assert f"warning: {item}: a temporary folder left by a run that did not finish" in again.stderr, (
                again.stderr
            )
        else:
            assert item not in holding
