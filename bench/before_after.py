"""Issue 12's before/after check, the Python half of ``bench/before_after.sh``: same workload, old
code (688ee41, its own ``configs/h200-fast.toml``) against new code (HEAD,
``bench/configs/h200-fast-688ee41.toml``).

Three modes, each a plain script call (``python bench/before_after.py MODE ...``; standard library
only, except ``dump-config``, which imports ``foxhunt.config`` from whichever tree PYTHONPATH
names, old or new):

    dump-config CONFIG OUT       the resolved configuration (every section, defaults included) as JSON
    compare OLD.json NEW.json    do the two resolve to the same workload? Old keys removed by issue 12
                                 are checked through their [accel] replacement (``REMOVED``); keys
                                 that only the new code has must sit at their neutral values
                                 (``NEUTRAL``). Prints the differences, writes --out JSON.
    report MANIFEST              reads the bench_train JSONs listed in MANIFEST (lines:
                                 ``label round rc seconds json log``), prints the side-by-side table
                                 and writes the combined JSON (--out) with both revisions.

Figures in the table, all from bench_train's JSON (seconds are wall seconds):
    env-steps/s (steady)   transitions_per_epoch / steady epoch (an epoch = collection + its
                           updates; the first epoch of the run, with graph capture, excluded)
    updates/s (steady)     rounds_per_epoch × train_steps_per_round / steady epoch
    collect / train / eval  wall_s sums over every epoch of every fold (first epochs included)
    val Sharpe             the greedy agent's validation Sharpe per fold (and the mean)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

# ------------------------------------------------------------------------------------- configs
PART_OF = {"fused_env": "env_step", "fused_acting": "acting", "fused_train_step": "train_step",
           "fused_replay": "replay", "compile_env": "env_step", "compile_learner": "train_step"}
"""688ee41's [dqn] switches -> the [accel] part that replaced them (train.eval_fused -> eval)."""

NEUTRAL: dict[str, Any] = {
    "train.agent": "dqn", "train.select": "last", "train.train_cost_multiplier": 1.0,
    "accel.readback": "sync", "accel.check": False, "features.long_momentum": [], "train.ensemble": 1,
}
"""Keys only the new code has, at the value that reproduces the old behaviour."""

IGNORED_NEW = ("ppo.", "train.inner_fraction", "train.abstain", "accel.", "dqn.tree_arity")
"""New keys checked elsewhere (accel.*, tree_arity: through ``REMOVED``) or unused by this run
(ppo.*: train.agent is dqn; inner_fraction, abstain, abstain_z: only read with select = inner)."""


def effective_part(accel: dict[str, Any], part: str) -> str:
    """What the new resolver runs for ``part`` on CUDA with Triton (config-level: the plan the run
    records is in its bench JSON, ``accel``)."""
    override = accel.get(part, "auto")
    if override != "auto":
        return override
    backend = accel.get("backend", "auto")
    if backend == "auto":
        return "torch" if part == "acting" else "fused"  # NOT_AUTO: auto leaves acting in torch
    if backend == "compiled" and part in ("replay", "eval"):
        return "torch"
    return backend


def old_part(old: dict[str, Any], part: str) -> str:
    """What 688ee41 ran for ``part`` on CUDA, from its [dqn] / [train] switches."""
    d, t = old["dqn"], old["train"]
    if part == "env_step":
        return "fused" if d["fused_env"] else "compiled" if d["compile_env"] else "torch"
    if part == "acting":
        return "fused" if d["fused_acting"] else "torch"
    if part == "train_step":
        return "fused" if d["fused_train_step"] else "compiled" if d["compile_learner"] else "torch"
    if part == "replay":  # proportional_wide: Triton trees on CUDA whatever fused_replay said
        return "fused" if d["sampler"] == "proportional_wide" or (d["sampler"] == "proportional" and d["fused_replay"]) else "torch"
    if part == "eval":
        return "fused" if t["eval_fused"] else "torch"
    raise KeyError(part)


def compare(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Key-by-key agreement of two resolved configurations (old: 688ee41's, new: HEAD's)."""
    equal: list[str] = []
    diffs: list[dict[str, Any]] = []
    mapped: list[dict[str, Any]] = []

    def check(key: str, want: Any, got: Any, how: str | None = None) -> None:
        row = {"key": key, "old": want, "new": got}
        if how is not None:
            row["via"] = how
        if want != got:
            diffs.append(row)
        elif how is not None:
            mapped.append(row)
        else:
            equal.append(key)

    nd, na = new.get("dqn", {}), new.get("accel", {})
    for section, values in old.items():
        for key, value in values.items():
            name = f"{section}.{key}"
            if section == "dqn" and key in PART_OF:
                part = PART_OF[key]
                check(name, old_part(old, part), effective_part(na, part), f"accel {part}")
            elif name == "train.eval_fused":
                check(name, old_part(old, "eval"), effective_part(na, "eval"), "accel eval")
            elif name == "dqn.cuda_graphs":
                check(name, "on" if value else "off", {"auto": "on", "on": "on", "off": "off"}.get(na.get("graphs")),
                      "accel.graphs (auto: on with CUDA)")
            elif name == "dqn.matmul_precision":
                check(name, value, na.get("matmul_precision"), "accel.matmul_precision")
            elif name == "dqn.lagged_readback":
                check(name, "lagged" if value else "sync", na.get("readback"), "accel.readback")
            elif name == "dqn.sampler" and value == "proportional_wide":
                check(name, "proportional, tree_arity 32", f"{nd.get('sampler')}, tree_arity {nd.get('tree_arity')}",
                      "dqn.sampler + dqn.tree_arity")
            elif key not in new.get(section, {}):
                diffs.append({"key": name, "old": value, "new": "<absent>"})
            else:
                check(name, value, new[section][key])
    for part in ("env_step", "acting", "train_step", "replay", "eval"):
        mapped.append({"key": f"part {part}", "old": old_part(old, part), "new": effective_part(na, part),
                       "via": "effective implementation on CUDA"})
        if mapped[-1]["old"] != mapped[-1]["new"]:
            diffs.append(mapped.pop())
    new_only = []
    for section, values in new.items():
        for key, value in values.items():
            name = f"{section}.{key}"
            if key in old.get(section, {}):
                continue
            if name in NEUTRAL:
                check(name, NEUTRAL[name], value, "new key, neutral value")
            elif not name.startswith(IGNORED_NEW):
                new_only.append({"key": name, "new": value})
    return {"same_workload": not diffs and not new_only, "equal_keys": len(equal), "mapped": mapped,
            "differences": diffs, "unchecked_new_keys": new_only}


def print_agreement(a: dict[str, Any]) -> None:
    verdict = "SAME workload" if a["same_workload"] else "DIFFERENT"
    print(f"config agreement: {verdict}: {a['equal_keys']} keys equal, {len(a['mapped'])} checked through their "
          f"replacement, {len(a['differences'])} differ, {len(a['unchecked_new_keys'])} new keys unchecked")
    for d in a["differences"]:
        print(f"  DIFFERS {d['key']}: old {d['old']!r} new {d['new']!r}" + (f" ({d['via']})" if "via" in d else ""))
    for d in a["unchecked_new_keys"]:
        print(f"  NEW KEY {d['key']} = {d['new']!r}")


# ------------------------------------------------------------------------------------- report
def figures(r: dict[str, Any], old_acting: str = "?") -> dict[str, Any]:
    """The comparable figures of one bench_train JSON (keys both revisions write). The old bench
    records no plan: its acting is ``old_acting`` (what its switches ran: fused unless overridden)."""
    w, q = r["wall_s"], r["dqn"]
    steady = r.get("epoch_s_steady_mean")
    val = [v["agent_sharpe"] for v in r.get("validation", [])]
    mem = r.get("memory_bytes") or {}
    syncs = r.get("host_syncs_per_epoch") or {}
    acc = r.get("accel") or {}
    return {
        "acting": acc.get("acting", f"{old_acting} (switch)"),
        "total_s": w["total"], "run_s": w["run"], "trainer_build_s": w["trainer_build"],
        "collection_s": w["collection"], "training_s": w["training"], "epochs_s": w["epochs"],
        "evaluation_s": w["evaluation"], "buy_and_hold_s": w["buy_and_hold"], "checkpoints_s": w["checkpoints"],
        "epoch_first_s": r.get("epoch_s_first"), "epoch_steady_s": steady,
        "env_steps_per_s": r["transitions_per_epoch"] / steady if steady else None,
        "updates_per_s": q["rounds_per_epoch"] * q["train_steps_per_round"] / steady if steady else None,
        "syncs_steady_max": syncs.get("steady_max"),
        "peak_mib": mem["peak_allocated"] / 2**20 if mem.get("peak_allocated") else None,
        "val_sharpe_mean": sum(val) / len(val) if val else None,
        "val_sharpe": val,
    }


ROWS = [("acting", "acting", "{}"), ("total_s", "total s", "{:.2f}"), ("run_s", "run s", "{:.2f}"),
        ("trainer_build_s", "trainer build s", "{:.2f}"), ("epoch_first_s", "first epoch s", "{:.3f}"),
        ("epoch_steady_s", "steady epoch s", "{:.4f}"), ("env_steps_per_s", "env-steps/s (steady)", "{:,.0f}"),
        ("updates_per_s", "updates/s (steady)", "{:,.1f}"), ("collection_s", "collection s", "{:.2f}"),
        ("training_s", "training s", "{:.2f}"), ("evaluation_s", "evaluation s", "{:.2f}"),
        ("buy_and_hold_s", "buy-and-hold s", "{:.2f}"), ("checkpoints_s", "checkpoints s", "{:.2f}"),
        ("syncs_steady_max", "host syncs/epoch", "{}"), ("peak_mib", "peak MiB", "{:.0f}"),
        ("val_sharpe_mean", "val Sharpe mean", "{:.3f}")]


def table(runs: list[dict[str, Any]]) -> str:
    """Rows: the figures; columns: the runs (label/round); failed runs show their exit status."""
    heads = [f"{r['label']}/{r['round']}" for r in runs]
    cols = [r.get("figures") for r in runs]
    lines = [f"{'':<22}" + "".join(f"{h:>18}" for h in heads)]

    def cell(f: dict[str, Any] | None, key: str, fmt: str, r: dict[str, Any]) -> str:
        if f is None:
            return "skipped" if r["rc"] is None else f"rc={r['rc']}"
        v = f.get(key)
        return "-" if v is None else fmt.format(v)

    for key, name, fmt in ROWS:
        lines.append(f"{name:<22}" + "".join(f"{cell(f, key, fmt, r):>18}" for f, r in zip(cols, runs)))
    n = max((len(f["val_sharpe"]) for f in cols if f), default=0)
    for k in range(n):
        cells = ["{:.3f}".format(f["val_sharpe"][k]) if f and k < len(f["val_sharpe"]) else "-" for f in cols]
        lines.append(f"{'val Sharpe fold ' + str(k):<22}" + "".join(f"{c:>18}" for c in cells))
    return "\n".join(lines)


def ratios(runs: list[dict[str, Any]], base: str = "old") -> list[dict[str, Any]]:
    """new / old for the time and rate figures, per round (>1 on a rate and <1 on a time: faster)."""
    keys = ("total_s", "run_s", "epoch_steady_s", "env_steps_per_s", "updates_per_s", "collection_s", "training_s",
            "evaluation_s")
    by = {(r["label"], r["round"]): r.get("figures") for r in runs}
    out = []
    for r in runs:
        b = by.get((base, r["round"]))
        if r["label"] == base or not b or not r.get("figures"):
            continue
        f = r["figures"]
        out.append({"run": f"{r['label']}/{r['round']}", "vs": f"{base}/{r['round']}",
                    **{k: (f[k] / b[k] if f.get(k) and b.get(k) else None) for k in keys}})
    return out


def report(manifest: Path, out: Path, meta: dict[str, str], agreement: Path | None) -> dict[str, Any]:
    """The combined JSON of one before/after call (written to ``out``) from its manifest."""
    runs = []
    for line in manifest.read_text().splitlines():
        if not line.strip():
            continue
        label, rnd, rc, secs, js, log = line.split()
        row: dict[str, Any] = {"label": label, "round": rnd, "rc": None if rc == "skip" else int(rc),
                               "seconds": None if secs == "-" else float(secs), "log": log}
        p = Path(js)
        if row["rc"] == 0 and p.is_file():
            row["result"] = json.loads(p.read_text())
            row["figures"] = figures(row["result"], meta.get("old_acting", "?"))
        elif row["rc"] is not None and Path(log).is_file():
            row["log_tail"] = Path(log).read_text(errors="replace").splitlines()[-30:]
        runs.append(row)
    combined = {
        "bench": "before_after",
        "issue": 12,
        "before": {"revision": meta.get("before_rev"), "config": "configs/h200-fast.toml at that revision",
                   "command": "python -m bench.bench_train --config configs/h200-fast.toml (inside the old tree)"},
        "after": {"revision": meta.get("after_rev"), "config": "bench/configs/h200-fast-688ee41.toml",
                  "command": "python -m bench.bench_train --config bench/configs/h200-fast-688ee41.toml "
                             "(new_torch: --set accel.acting=\"torch\")"},
        "bench_args": meta.get("bench_args", ""),
        "quick": meta.get("quick") == "1",
        "cpu_variant": meta.get("cpu_variant"),
        "rounds": "cold: each label with its own empty Triton/Inductor cache dirs; warm: the same dirs again",
        "config_agreement": json.loads(agreement.read_text()) if agreement and agreement.is_file() else None,
        "runs": runs,
        "ratios_vs_old": ratios(runs),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(combined, indent=2, default=float) + "\n")
    return combined


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    d = sub.add_parser("dump-config")
    d.add_argument("config")
    d.add_argument("out", type=Path)
    c = sub.add_parser("compare")
    c.add_argument("old", type=Path)
    c.add_argument("new", type=Path)
    c.add_argument("--out", type=Path, default=None)
    r = sub.add_parser("report")
    r.add_argument("manifest", type=Path)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--agreement", type=Path, default=None)
    r.add_argument("--meta", action="append", default=[], help="key=value recorded in the combined JSON")
    a = ap.parse_args(argv)
    if a.mode == "dump-config":
        import foxhunt
        from foxhunt.config import load_config

        data = load_config(a.config).to_dict()
        a.out.write_text(json.dumps({"foxhunt": str(Path(foxhunt.__file__).parent), "config": data}, indent=1))
        return 0
    if a.mode == "compare":
        old, new = (json.loads(p.read_text())["config"] for p in (a.old, a.new))
        agreement = compare(old, new)
        print_agreement(agreement)
        if a.out:
            a.out.write_text(json.dumps(agreement, indent=1, default=str) + "\n")
        return 0 if agreement["same_workload"] else 1
    meta = dict(m.split("=", 1) for m in a.meta)
    combined = report(a.manifest, a.out, meta, a.agreement)
    print(f"before {meta.get('before_rev', '?')[:12]}  after {meta.get('after_rev', '?')[:12]}  {combined['bench_args']}")
    if combined["cpu_variant"]:
        print(f"CPU check: {combined['cpu_variant']}")
    print(table(combined["runs"]))
    for q in combined["ratios_vs_old"]:
        print(f"  {q['run']} / {q['vs']}: " + ", ".join(f"{k} {v:.3f}" for k, v in q.items()
                                                          if k not in ("run", "vs") and v is not None))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
