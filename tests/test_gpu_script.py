"""scripts/gpu.sh's step limits: with BUDGET_S (the device call's limit) a step's timeout is cut to what is left
of the call, and a step with under 20 s left is skipped, so a call that runs out still returns what finished."""

import re
import subprocess
from pathlib import Path

GPU_SH = Path(__file__).resolve().parents[1] / "scripts" / "gpu.sh"


def _run_step_functions(tmp_path: Path, prelude: str, calls: str) -> str:
    text = GPU_SH.read_text()
    body = text[text.index("T0=$(date +%s)"):text.index("# scorecard NAME")]  # cut() and step() only
    script = f"OUT={tmp_path}\n{prelude}\n{body}\n{calls}\n"
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60).stdout


def test_a_steps_limit_is_cut_to_the_budget_left_and_a_late_step_is_skipped(tmp_path):
    out = _run_step_functions(tmp_path, "BUDGET_S=100; CP_S=30",
                              "step 500 true; echo rc=$?; T0=$(( $(date +%s) - 60 )); step 500 true; echo rc=$?")
    assert "=== true (limit 70s)" in out and "rc=0" in out
    # 100 s budget - 60 s spent - 30 s checkpoint margin; a second may tick between the two clock reads
    assert re.search(r"=== skipped \(BUDGET_S: (10|9)s left\): true", out) and "rc=124" in out


def test_without_a_budget_a_step_keeps_its_own_limit(tmp_path):
    out = _run_step_functions(tmp_path, "unset BUDGET_S", "step 500 true; echo rc=$?")
    assert "=== true (limit 500s)" in out and "rc=0" in out
