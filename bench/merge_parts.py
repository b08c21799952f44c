"""Merge the part files of one benchmark run split over processes (``scripts/gpu.sh`` step fampar):
STEM_part0.json, STEM_part1.json, … → STEM.json, their ``rows`` concatenated (sorted by draw), every
other key from part 0 (a family run's gates, or each baseline's, recomputed over the merged rows), and the part files removed.

    python -m bench.merge_parts gamma_grid_cuda_cand
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.common import RESULTS, write_result


def merge(name: str) -> Path:
    """Merge bench/results/NAME_part*.json into bench/results/NAME.json; returns its path."""
    parts = sorted(RESULTS.glob(name + "_part*.json"))
    if not parts:
        raise SystemExit(f"no part files {RESULTS}/{name}_part*.json")
    docs = [json.loads(p.read_text()) for p in parts]
    rows = sorted((r for d in docs for r in d.get("rows", [])), key=lambda r: (r.get("index", 0), r.get("variant", "")))
    # the draws the rows hold (a part stopped by its time limit lists draws it never scored)
    draws = list(dict.fromkeys(r["index"] for r in rows)) if all("index" in r for r in rows) else [d.get("draws", "") for d in docs]
    out = {**docs[0], "rows": rows, "draws": ",".join(map(str, draws)), "parts": len(parts),
           "revisions": sorted({str((d.get("machine") or {}).get("git_revision")) for d in docs})}
    if "family_gates" in out:  # bench/bench_family.py: the gates pool every part's draws
        from foxhunt.scorecard.family.gates import block_from_rows

        out["family_gates"] = block_from_rows(rows, out["family_set"], out["size"])["gates"]
    if "pooled" in out:  # bench/bench_family_baselines.py: each baseline's gates over every part's draws
        from foxhunt.scorecard.family.gates import family_gates

        out["pooled"] = {name: {g["name"]: g["value"] for g in family_gates([r["rows"][name] for r in rows])}
                         for name in out["pooled"]}
    path = write_result(name, out)
    for p in parts:
        p.unlink()
    return path


if __name__ == "__main__":
    print(merge(sys.argv[1]))
