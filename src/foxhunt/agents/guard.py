"""The training guard shared by the learners: on-device checks of each gradient step.

A step is *bad* when its loss or gradient norm is non-finite or its loss exceeds ``loss_clip``,
or (DQN: the Q-divergence check) when any |Q| of the online network on its batch exceeds
``q_divergence``; it is then skipped by masking (the caller passes ``ok`` to ``MaskedAdam.step``:
parameters and optimiser state stay bitwise unchanged) and counted. The sticky ``halted`` flag
rises when more than ``max_skipped`` steps were skipped in the fold, at once on a diverged Q (a
network that diverges while staying finite is not trained on), or when the gradient norm stayed
below ``collapse`` for ``patience`` consecutive steps after ``warmup`` steps. Everything is a device
op (no host reads), so a guarded step can be captured in a CUDA graph; the host learns of a halt
at the epoch readback and stops with ``halt_message``.

``guard_check`` is the pure form (state tensors passed in, updated in place) that the DQN fused
train step calls inside its compiled program; ``Guard`` holds the state for the eager learners
(DQN's ``QLearner`` and PPO's ``PPOLearner``).
"""

from __future__ import annotations

import math

import torch


def guard_check(loss: torch.Tensor, gnorm: torch.Tensor, steps: torch.Tensor, state: dict[str, torch.Tensor], *,
                loss_clip: float, collapse: float, warmup: int, patience: int, max_skipped: int,
                q_divergence: float = math.inf, q_abs_max: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Judge one step: loss, gnorm (0-d float), steps (0-d int64, steps taken in the fold);
    q_abs_max (0-d float, optional): the largest |Q| of the online network on the step's batch.

    state: ``Guard.state_tensors()`` layout (collapse_run, skipped_total: 0-d int64; halted,
    collapse_flag: 0-d bool), updated in place. Returns (ok, nonfinite, over_clip), 0-d bool
    (a diverged step is not ok; ``q_abs_max > q_divergence`` says why)."""
    collapse_run, skipped_total, halted = state["collapse_run"], state["skipped_total"], state["halted"]
    nonfinite = ~(torch.isfinite(loss) & torch.isfinite(gnorm))
    over_clip = loss > loss_clip
    ok = ~nonfinite & ~over_clip & ~halted
    diverged = None
    if q_abs_max is not None:
        diverged = q_abs_max > q_divergence
        ok = ok & ~diverged
    # Gradient collapse: consecutive tiny norms after warm-up raise the (sticky) halt flag.
    tiny = ok & (gnorm < collapse)
    collapse_run.copy_(torch.where(tiny, collapse_run + 1, torch.zeros_like(collapse_run)))
    collapsed = (steps >= warmup) & (collapse_run >= patience)
    bad = ~ok & ~halted
    skipped_total.add_(bad.long())
    halt = halted | collapsed | (skipped_total > max_skipped)
    halted.copy_(halt if diverged is None else halt | diverged)
    state["collapse_flag"].logical_or_(collapsed)
    return ok, nonfinite, over_clip


class Guard:
    """Guard state for one learner (device tensors, reset per fold)."""

    def __init__(self, device: torch.device, *, loss_clip: float, collapse: float, warmup: int, patience: int,
                 max_skipped: int, q_divergence: float = math.inf) -> None:
        self.limits = dict(loss_clip=loss_clip, collapse=collapse, warmup=warmup, patience=patience,
                           max_skipped=max_skipped, q_divergence=q_divergence)
        self.collapse_run = torch.zeros((), dtype=torch.int64, device=device)
        self.skipped_total = torch.zeros((), dtype=torch.int64, device=device)
        self.halted = torch.zeros((), dtype=torch.bool, device=device)
        self.collapse_flag = torch.zeros((), dtype=torch.bool, device=device)

    def reset(self) -> None:
        for t in (self.collapse_run, self.skipped_total, self.halted, self.collapse_flag):
            t.zero_()

    def check(self, loss: torch.Tensor, gnorm: torch.Tensor, steps: torch.Tensor, q_abs_max: torch.Tensor | None = None
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``guard_check`` on this guard's state: (ok, nonfinite, over_clip), 0-d bool."""
        return guard_check(loss, gnorm, steps, self.state_tensors(), q_abs_max=q_abs_max, **self.limits)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        return {"collapse_run": self.collapse_run, "skipped_total": self.skipped_total, "halted": self.halted,
                "collapse_flag": self.collapse_flag}


def halt_message(values: dict[str, float], *, fold: object, epoch: int, loss_clip: float, collapse: float,
                 patience: int, q_divergence: float | None = None) -> str:
    """The one-line error naming the check(s) that halted training (from an epoch summary)."""
    checks = []
    if values.get("q_diverged"):
        checks.append(f"Q-value divergence (max |Q| {values['q_abs_max']:.4g} above dqn.q_divergence={q_divergence:g} "
                      f"in {int(values['q_diverged'])} steps)")
    if values.get("skip_nonfinite"):
        checks.append(f"non-finite loss or gradient norm ({int(values['skip_nonfinite'])} steps skipped)")
    if values.get("skip_loss_clip"):
        checks.append(f"loss above loss_clip={loss_clip:g} ({int(values['skip_loss_clip'])} steps skipped)")
    if values.get("halt_collapse"):
        checks.append(f"gradient collapse (norm < {collapse:g} for {patience} steps)")
    what = "; ".join(checks) or "guard halt flag"
    return f"training halted by the guard in fold {fold}, epoch {epoch}: {what}"
