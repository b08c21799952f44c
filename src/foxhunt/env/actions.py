"""Action decoding: factored actions (exposure × order type × urgency) and exposure-mode routing.

Factored ``a = 9·e + 3·o + u`` (45 actions); exposure mode ``a = e`` (5 actions) with the order type
routed from the decision bar's range and the urgency from the volatility EMA (ENV_SPEC "Actions").
All functions are elementwise over [N] tensors, branch-free and allocation-shape-static.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

N_LEVELS = 5
N_ORDER_TYPES = 3
N_URGENCIES = 3
N_FACTORED_ACTIONS = N_LEVELS * N_ORDER_TYPES * N_URGENCIES  # 45
N_EXPOSURE_ACTIONS = N_LEVELS  # 5
FLAT_LEVEL = 2

MARKET, LIMIT, IOC = 0, 1, 2
PATIENT, NORMAL, AGGRESSIVE = 0, 1, 2
EXPOSURE_FRACTIONS = (-1.0, -0.5, 0.0, 0.5, 1.0)
URGENCY_MULTIPLIERS = (0.5, 1.0, 2.0)
SHORT, FLAT, LONG = 0, 1, 2  # diversity categories


class Decoded(NamedTuple):
    """level e [N] int64, order type o [N] int64, urgency u [N] int64, urgency multiplier m_u [N] float32."""

    level: torch.Tensor
    order: torch.Tensor
    urgency: torch.Tensor
    mult: torch.Tensor


def decode_factored(actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(e, o, u) of factored actions [N] int64 in [0, 45)."""
    return actions // 9, (actions // 3) % 3, actions % 3


def route_order(bar_range: torch.Tensor, median_range: torch.Tensor) -> torch.Tensor:
    """Order type from the spread proxy rg_t vs med_range: ≤0 median → market; rg < med → limit;
    rg > 2·med → market; otherwise IoC. [N] int64."""
    o = torch.where(bar_range > 2.0 * median_range, MARKET, IOC)
    o = torch.where(bar_range < median_range, LIMIT, o)
    return torch.where(median_range <= 0, MARKET, o)


def route_urgency(vol: torch.Tensor, median_abs_return: torch.Tensor) -> torch.Tensor:
    """Urgency from the volatility EMA v vs med_absret: ≤0 median → normal; v > 1.5·med → aggressive;
    v < 0.5·med → patient; otherwise normal. [N] int64."""
    u = torch.where(vol > 1.5 * median_abs_return, AGGRESSIVE, NORMAL)
    u = torch.where(vol < 0.5 * median_abs_return, PATIENT, u)
    return torch.where(median_abs_return <= 0, NORMAL, u)


def urgency_multiplier(urgency: torch.Tensor) -> torch.Tensor:
    """m_u = (0.5, 1, 2)[u] = 2^(u−1), float32 [N] (exact)."""
    return torch.exp2(urgency.to(torch.float32) - 1.0)


def exposure_fraction(level: torch.Tensor) -> torch.Tensor:
    """(−1, −½, 0, ½, 1)[e] = (e − 2)/2, float32 [N] (exact)."""
    return (level.to(torch.float32) - 2.0) * 0.5


def category(level: torch.Tensor) -> torch.Tensor:
    """Diversity category of a level: e ∈ {0,1} short (0), 2 flat (1), {3,4} long (2). [N] int64."""
    return torch.where(level <= 1, SHORT, torch.where(level == FLAT_LEVEL, FLAT, LONG))


def decode(
    actions: torch.Tensor,
    action_mode: str,
    bar_range: torch.Tensor | None = None,
    median_range: torch.Tensor | None = None,
    vol: torch.Tensor | None = None,
    median_abs_return: torch.Tensor | None = None,
) -> Decoded:
    """Decode actions [N] int64. Out-of-range actions are clamped into range (no host check here;
    the Gymnasium wrappers check on the host). Exposure mode needs the routing inputs."""
    if action_mode == "factored":
        a = actions.clamp(0, N_FACTORED_ACTIONS - 1)
        e, o, u = decode_factored(a)
    elif action_mode == "exposure":
        if bar_range is None or median_range is None or vol is None or median_abs_return is None:
            raise ValueError("exposure action mode needs bar_range, median_range, vol and median_abs_return")
        e = actions.clamp(0, N_EXPOSURE_ACTIONS - 1)
        o = route_order(bar_range, median_range)
        u = route_urgency(vol, median_abs_return)
    else:
        raise ValueError(f"action_mode {action_mode!r}: expected 'factored' or 'exposure'")
    return Decoded(e, o, u, urgency_multiplier(u))


def n_actions(action_mode: str) -> int:
    """45 (factored) or 5 (exposure)."""
    return N_FACTORED_ACTIONS if action_mode == "factored" else N_EXPOSURE_ACTIONS
