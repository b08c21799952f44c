"""The device's diagnosis tools: bench/sample_stacks.py attributes sampled wall time to the function a
command is in (and still writes its report when ``timeout`` stops the command); bench/run_timings.py
reads every fold's and epoch's seconds from a scorecard's run folders."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.run_timings import run_timings

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import pathlib
import time

pathlib.Path({marker!r}).write_text("started")  # the sampler is running by now (it starts before the script)

def busy_wait_in_here(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass

busy_wait_in_here({seconds})
"""


def _sample(tmp_path: Path, seconds: float) -> subprocess.Popen:
    script = tmp_path / "work.py"
    script.write_text(SCRIPT.format(seconds=seconds, marker=str(tmp_path / "started")))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    return subprocess.Popen([sys.executable, "-m", "bench.sample_stacks", "--out", str(tmp_path / "stacks.json"),
                             "--interval", "0.02", "--", str(script)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_sample_stacks_attributes_the_wall_time_to_the_running_function(tmp_path: Path) -> None:
    p = _sample(tmp_path, 1.0)
    assert p.wait(timeout=60) == 0, p.stderr.read()
    rep = json.loads((tmp_path / "stacks.json").read_text())
    assert rep["samples"] > 10 and 0.9 <= rep["wall_s"] < 30
    top = rep["top_stacks"][0]
    assert top["stack"][-1].endswith(":busy_wait_in_here")
    assert top["s"] >= 0.5 * rep["samples"] * rep["interval_s"]  # most of the sampled time (fewer samples on a loaded machine)
    assert abs(sum(rep["phase_s"].values()) - rep["samples"] * rep["interval_s"]) < 0.05  # every sample has a phase


def test_sample_stacks_writes_its_report_when_timeout_stops_the_command(tmp_path: Path) -> None:
    p = _sample(tmp_path, 60.0)
    deadline = time.monotonic() + 60
    while not (tmp_path / "started").exists() and time.monotonic() < deadline:  # a loaded CI machine starts slowly
        time.sleep(0.1)
    time.sleep(0.5)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 124
    rep = json.loads((tmp_path / "stacks.json").read_text())
    assert rep["samples"] > 0 and rep["top_stacks"][0]["stack"][-1].endswith(":busy_wait_in_here")


def test_run_timings_reads_every_folds_seconds_and_epochs(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "regime"
    for k, (train_s, epochs) in enumerate([(3.0, [2.0, 1.0]), (2.0, [1.0, 1.0])]):
        d = run / "folds" / f"fold_{k}"
        d.mkdir(parents=True)
        (d / "timings.json").write_text(json.dumps({"transition_s": 0.1, "train_s": train_s, "eval_s": 0.2,
                                                    "resumed_at_epoch": None}))
    rows = [{"fold": f, "epoch": e, "epoch_s": s} for f, es in ((0, [2.0, 1.0]), (1, [1.0, 1.0])) for e, s in enumerate(es)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = run_timings(run)
    assert got == {"fold_0": {"transition_s": 0.1, "train_s": 3.0, "eval_s": 0.2, "epoch_s": [2.0, 1.0]},
                   "fold_1": {"transition_s": 0.1, "train_s": 2.0, "eval_s": 0.2, "epoch_s": [1.0, 1.0]}}
    out = subprocess.run([sys.executable, "-m", "bench.run_timings", str(tmp_path)], cwd=ROOT, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])})
    assert out.returncode == 0 and json.loads(out.stdout) == {"runs/regime": got}
