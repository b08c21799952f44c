"""The float64 oracle: one trading env, plain Python floats and simple loops, per docs/ENV_SPEC.md.

Written to be obviously right rather than fast, independently of the vectorised device env; the
parity tests hold the device env to it. Step numbers in comments refer to the spec's "One step".

Besides the spec's state and step outputs, each step records ``last_margins``: for every threshold
comparison made on that step (limit trade-through, barrier touches, IoC capacity, routing, entropy,
DSR variance floor, bust, Kelly win, a fresh q* against q), how far its two sides were apart,
relative to their size, and ``last_fills`` holds the (size, price) of each filled leg. The
parity tests use it to tell a float32 rounding tie from a real disagreement.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from foxhunt.env.reference_market import ParamValue, ReferenceMarket, resolve_params

__all__ = ["ReferenceEnv", "ReferenceMarket", "decode_factored", "category"]

BPS = 1e-4
EXPOSURE_LEVELS = (-1.0, -0.5, 0.0, 0.5, 1.0)
URGENCY_MULT = (0.5, 1.0, 2.0)
MARKET, LIMIT, IOC = 0, 1, 2
FILL_NONE, FILL_FILLED, FILL_PARTIAL, FILL_MISSED = 0, 1, 2, 3
FLAT_LEVEL = 2


def decode_factored(action: int) -> tuple[int, int, int]:
    """Factored action a = 9·e + 3·o + u → (exposure level e, order type o, urgency u)."""
    if not 0 <= action < 45:
        raise ValueError(f"factored action must lie in [0, 45), got {action}")
    return action // 9, (action // 3) % 3, action % 3


def category(level: int) -> int:
    """Diversity category of an exposure level: 0 short (e ≤ 1), 1 flat (e = 2), 2 long (e ≥ 3)."""
    return 0 if level <= 1 else (1 if level == 2 else 2)


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def _rel(a: float, b: float) -> float:
    """|a − b| relative to the larger magnitude (absolute when both are ~0)."""
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


class ReferenceEnv:
    """One env of the spec in float64. No auto-reset: the caller calls ``reset``.

    State attributes (spec "State"): cash, position, equity, entry_price, entry_bar, bar,
    episode_start, step_in_episode, requested_level, target, barrier_active, barrier_upper,
    barrier_lower, barrier_expiry, barrier_side, vol_ema, kelly_win_rate, kelly_mean_win,
    kelly_mean_loss, kelly_count, dsr_a, dsr_b, diversity_ring (oldest first), diversity_counts,
    equity_peak, cum_costs, open_trade_costs.

    Accounting reads the spec's ``q += d·size`` in exact arithmetic: a leg that fills in full sets
    q to exactly q* (or to 0 for the closing leg of a reversal), so that a held level has Δq = 0
    exactly and never trades dust; a partial IoC fill adds ``d·filled``.
    """

    def __init__(self, market: ReferenceMarket, params: Mapping[str, ParamValue] | None = None) -> None:
        self.m = market
        self.p = resolve_params(params)
        self.last_margins: dict[str, float] = {}
        self.last_fills: list[tuple[float, float]] = []  # (size, price) of the legs filled on the last step
        # Persistent across episodes (reset only by explicit flags).
        self.vol_ema = float(market.med_absret)
        self.kelly_win_rate, self.kelly_mean_win, self.kelly_mean_loss, self.kelly_count = 0.5, 0.0, 0.0, 0
        self.dsr_a = self.dsr_b = 0.0
        self.diversity_ring: list[int] = []
        self.diversity_counts = [0, 0, 0]
        self.bar = self.episode_start = market.train_start
        self._fresh_portfolio()

    # ------------------------------------------------------------------ resets
    def _fresh_portfolio(self) -> None:
        cap = float(self.p["capital"])
        self.cash, self.position, self.equity = cap, 0.0, cap
        self.entry_price, self.entry_bar = 0.0, 0
        self.requested_level, self.target = FLAT_LEVEL, 0.0
        self.barrier_active, self.barrier_upper, self.barrier_lower = False, 0.0, 0.0
        self.barrier_expiry, self.barrier_side = 0, 0
        self.step_in_episode = 0
        self.equity_peak, self.cum_costs, self.open_trade_costs = cap, 0.0, 0.0

    def reset(self, start: int) -> None:
        """Fresh portfolio at bar ``start``; persistent state (v, Kelly, DSR, diversity) is kept."""
        start = int(start)
        if not 0 <= start < self.m.n_bars - 1:
            raise ValueError(f"reset: start {start} outside [0, {self.m.n_bars - 1})")
        self._fresh_portfolio()
        self.bar = self.episode_start = start

    def apply_reset_flags(self, flags: int) -> None:
        """Bit 0: fresh portfolio and a new episode at the same bar, wrapped back into the random
        starts' range when a full episode would run past train_end; bit 1: DSR moments to 0; bit 2:
        v to med_absret.

        Bits 3 (Kelly statistics) and 4 (diversity ring) are not in the spec's list, which calls
        those two "reset only by explicit flags" without naming bits; they follow the device env.
        """
        if flags & 1:
            self._fresh_portfolio()
            lo = self.m.train_start
            span = max(1, self.m.train_end - int(self.p["episode_length"]) - lo)
            if self.m.mirror_offset and self.bar >= self.m.mirror_offset:  # stays in the mirrored copy
                lo += self.m.mirror_offset
            self.bar = self.episode_start = lo + (self.bar - lo) % span
        if flags & 2:
            self.dsr_a = self.dsr_b = 0.0
        if flags & 4:
            self.vol_ema = float(self.m.med_absret)
        if flags & 8:
            self.kelly_win_rate, self.kelly_mean_win, self.kelly_mean_loss, self.kelly_count = 0.5, 0.0, 0.0, 0
        if flags & 16:
            self.diversity_ring, self.diversity_counts = [], [0, 0, 0]

    # ------------------------------------------------------------------ features
    def portfolio_features(self) -> tuple[float, float, float]:
        """(exposure q·C_t/E, unrealised return side·(C_t − entry)/entry, (t − entry bar)/max_holding)."""
        c = float(self.m.close[self.bar])
        exposure = self.position * c / self.equity
        if self.position == 0.0:
            return exposure, 0.0, 0.0
        side = _sign(self.position)
        unreal = side * (c - self.entry_price) / self.entry_price
        return exposure, unreal, (self.bar - self.entry_bar) / float(self.p["max_holding"])

    # ------------------------------------------------------------------ decisions
    def decode(self, action: int) -> tuple[int, int, int]:
        """(e, o, u) of ``action`` at the current bar (exposure mode routes o and u, step 1)."""
        if self.p["action_mode"] == "factored":
            return decode_factored(int(action))
        e = int(action)
        if not 0 <= e < 5:
            raise ValueError(f"exposure-mode action must lie in [0, 5), got {action}")
        rg, mr = float(self.m.bar_range[self.bar]), self.m.med_range
        if mr <= 0:
            o = MARKET
        else:
            self.last_margins["route_range"] = min(_rel(rg, mr), _rel(rg, 2 * mr))
            o = LIMIT if rg < mr else (MARKET if rg > 2 * mr else IOC)
        v, ma = self.vol_ema, self.m.med_absret
        if ma <= 0:
            u = 1
        else:
            self.last_margins["route_vol"] = min(_rel(v, 1.5 * ma), _rel(v, 0.5 * ma))
            u = 2 if v > 1.5 * ma else (0 if v < 0.5 * ma else 1)
        return e, o, u

    def kelly_multiplier(self) -> float:
        """k of step 4: 1 until Kelly sizing is on and enough trades closed, then the clamped bet."""
        if not self.p["kelly"] or self.kelly_count < int(self.p["kelly_min_trades"]):
            return 1.0
        p, w, lo = self.kelly_win_rate, self.kelly_mean_win, self.kelly_mean_loss
        if lo <= 0:
            f = p
        elif w <= 0:
            f = -math.inf
        else:
            f = p - (1.0 - p) / (w / lo)
        return min(max(float(self.p["kelly_fraction"]) * f, float(self.p["kelly_min_mult"])), 1.0)

    # ------------------------------------------------------------------ one step
    def step(self, action: int, curiosity: float = 0.0) -> tuple[float, bool, dict[str, Any]]:
        """Take ``action`` at bar t, fill on bar t+1, mark at C_{t+1}. Returns (reward, done, info)."""
        p, m = self.p, self.m
        t, t1 = self.bar, self.bar + 1
        if t1 >= m.n_bars:
            raise ValueError(f"step: bar {t} is the last bar; reset first")
        self.last_margins, self.last_fills = {}, []
        e, o, u = self.decode(action)  # 1
        mult = URGENCY_MULT[u]
        equity_before = self.equity
        close_t = float(m.close[t])
        if e != self.requested_level:  # 2
            self.requested_level = e
            x = EXPOSURE_LEVELS[e] * float(p["max_position"])
            self.target = x * self.kelly_multiplier() * (1.0 - float(p["reserve"])) * equity_before / close_t
            if self.position != 0.0:  # a fresh q* that lands on q is a Δq = 0 tie
                self.last_margins["target"] = _rel(self.target, self.position)
        info: dict[str, Any] = {"trade_closed": False, "trade_return": 0.0, "trade_side": 0, "trade_size": 0.0,
                                "trade_costs": 0.0, "trade_entry_bar": 0, "trade_exit_bar": 0}
        opened = self._fill(o, mult, t, info)  # 3, 4
        hit, label = self._barrier(opened, t1)  # 5
        # 6. Mark at the close of t+1.
        close1 = float(m.close[t1])
        self.equity = self.cash + self.position * close1
        self.equity_peak = max(self.equity_peak, self.equity)
        lam = float(p["vol_lambda"])
        self.vol_ema = lam * self.vol_ema + (1.0 - lam) * abs(float(m.log_return[t1]))
        reward = self._reward(equity_before, close1, hit, label, e, curiosity)  # 7
        # 8. Advance.
        self.bar, self.step_in_episode = t1, self.step_in_episode + 1
        bust_level = float(p["bust_fraction"]) * float(p["capital"])
        self.last_margins["bust"] = abs(self.equity - bust_level) / float(p["capital"])
        done = (self.step_in_episode == int(p["episode_length"]) or (hit and bool(p["end_on_barrier"]))
                or self.equity <= bust_level)
        info.update(reward=reward, done=done, next_bar=t1, next_portfolio=self.portfolio_features(),
                    barrier_hit=hit, barrier_label=label)
        return reward, done, info

    def step_decision(self, action: int, k: int, curiosity: float = 0.0) -> tuple[float, bool, dict[str, Any]]:
        """One decision (``env.decision_interval`` = k): ``action`` held for k bars, or until the episode
        ends inside them. Returns (the bars' rewards summed, done, info): the last bar's outputs, with
        barrier_hit any bar's (barrier_label the last hit's), trade_* the last closed round trip's and
        done / truncation where the decision ended; the curiosity bonus is added on the first bar only.
        ``last_margins`` holds each comparison's smallest margin over the k bars."""
        total, margins = 0.0, {}
        merged: dict[str, Any] = {}
        for j in range(int(k)):
            reward, done, info = self.step(action, curiosity if j == 0 else 0.0)
            for name, v in self.last_margins.items():
                margins[name] = min(margins.get(name, math.inf), v)
            total += reward
            if j == 0:
                merged = dict(info)
            else:
                hit_before = merged["barrier_hit"]
                closed_before = merged["trade_closed"]
                last_trade = {n: v for n, v in info.items() if n.startswith("trade_")} if info["trade_closed"] else {}
                merged.update({n: v for n, v in info.items() if not n.startswith("trade_") and n != "barrier_label"})
                merged.update(last_trade)
                merged["trade_closed"] = closed_before or info["trade_closed"]
                merged["barrier_hit"] = hit_before or info["barrier_hit"]
                if info["barrier_hit"]:
                    merged["barrier_label"] = info["barrier_label"]
            if done:
                break
        merged["reward"] = total
        self.last_margins = margins
        return total, bool(merged["done"]), merged

    def _fill(self, o: int, mult: float, t: int, info: dict[str, Any]) -> bool:
        """Steps 3–4: fill the order at bar t+1 and book its legs. Returns True if a position opened."""
        p, m = self.p, self.m
        t1 = t + 1
        q, qs = self.position, self.target
        dq = qs - q
        if dq == 0.0:
            info["fill_status"] = FILL_NONE
            return False
        d = _sign(dq)
        reversal = q != 0.0 and qs != 0.0 and _sign(q) != _sign(qs)
        # Legs: (size, position after a full fill). A full fill lands exactly on 0 or q*.
        legs = [(abs(q), 0.0), (abs(qs), qs)] if reversal else [(abs(dq), qs)]
        mr = m.med_range
        ratio = 1.0 if mr <= 0 else min(max(float(m.bar_range[t]) / mr, 0.25), 4.0)
        h = 0.5 * float(p["spread_bps"]) * BPS * ratio
        sigma = self.vol_ema * math.sqrt(math.pi / 2.0)
        open1, vol1 = float(m.open[t1]), float(m.volume[t1])

        def market_price(size: float) -> float:
            impact = 0.0
            if m.has_volume:
                impact = min(float(p["max_impact"]), float(p["impact_eta"]) * mult * sigma * math.sqrt(size / vol1))
            return open1 * (1.0 + d * (h + impact))

        fills: list[tuple[float, float, float]] = []  # (size, price, position after)
        status = FILL_FILLED
        if o == MARKET:
            fills = [(size, market_price(size), after) for size, after in legs]
        elif o == LIMIT:
            limit = float(m.close[t]) * (1.0 - d * h / mult)
            through = float(m.low[t1]) if d > 0 else float(m.high[t1])
            self.last_margins["limit"] = _rel(through, limit)
            if (through < limit) if d > 0 else (through > limit):
                price = min(limit, open1) if d > 0 else max(limit, open1)
                fills = [(size, price, after) for size, after in legs]
            else:
                status = FILL_MISSED
        else:  # IoC: capacity K per order, leg 2 only after leg 1 filled completely.
            cap = float(p["participation"]) * mult * vol1 if m.has_volume else math.inf
            pos = q
            for size, after in legs:
                if cap != math.inf:
                    self.last_margins["ioc"] = min(self.last_margins.get("ioc", math.inf), _rel(cap, size))
                if cap >= size:
                    fills.append((size, market_price(size), after))
                    cap, pos = cap - size, after
                    continue
                status = FILL_PARTIAL
                if cap > 0.0:
                    fills.append((cap, market_price(cap), pos + d * cap))
                break
        info["fill_status"] = status
        self.last_fills = [(size, price) for size, price, _ in fills]
        opened = False
        pos = q
        for size, price, after in fills:
            opened |= self._book_leg(pos, after, d, size, price, t1, info)
            pos = after
        return opened

    def _book_leg(self, q_old: float, q_new: float, d: int, size: float, price: float, t1: int,
                  info: dict[str, Any]) -> bool:
        """Step 4 for one filled leg: cash, position, costs, entry, round trip. True if it opened."""
        cost = float(self.p["cost_bps"]) * BPS * size * price
        self.cash -= d * size * price + cost
        self.position = q_new
        self.cum_costs += cost
        self.open_trade_costs += cost
        if q_old == 0.0:  # opening from flat (or the opening leg of a reversal)
            self.entry_price, self.entry_bar = price, t1
            return True
        if q_new == 0.0:  # a round trip closes
            side = _sign(q_old)
            ret = side * (price - self.entry_price) / self.entry_price
            info.update(trade_closed=True, trade_return=ret, trade_side=side, trade_size=abs(q_old),
                        trade_costs=self.open_trade_costs, trade_entry_bar=self.entry_bar, trade_exit_bar=t1)
            self._kelly_update(ret)
            self.entry_price, self.entry_bar, self.open_trade_costs = 0.0, 0, 0.0
            self.barrier_active = False
        elif abs(q_new) > abs(q_old):  # adding in the same direction: size-weighted average entry
            self.entry_price = (abs(q_old) * self.entry_price + size * price) / abs(q_new)
        return False

    def _kelly_update(self, ret: float) -> None:
        a = float(self.p["kelly_alpha"])
        self.last_margins["kelly_win"] = abs(ret)
        win = ret > 0
        self.kelly_win_rate += a * (float(win) - self.kelly_win_rate)
        if win:
            self.kelly_mean_win += a * (ret - self.kelly_mean_win)
        else:
            self.kelly_mean_loss += a * (-ret - self.kelly_mean_loss)
        self.kelly_count += 1

    def _barrier(self, opened: bool, t1: int) -> tuple[bool, int]:
        """Step 5: set a barrier on an opening, else check an earlier one on bar t+1 → (hit, label)."""
        p, m = self.p, self.m
        if self.position == 0.0:
            self.barrier_active = False
            return False, 0
        if opened:
            s, entry = _sign(self.position), self.entry_price
            prof, stop = float(p["profit_bps"]) * BPS, float(p["stop_bps"]) * BPS
            if s > 0:
                self.barrier_upper, self.barrier_lower = entry * (1 + prof), entry * (1 - stop)
            else:
                self.barrier_upper, self.barrier_lower = entry * (1 + stop), entry * (1 - prof)
            self.barrier_active, self.barrier_side = True, s
            self.barrier_expiry = self.entry_bar + int(p["max_holding"])
            return False, 0
        if not self.barrier_active:
            return False, 0
        hi, lo = float(m.high[t1]), float(m.low[t1])
        self.last_margins["barrier"] = min(_rel(lo, self.barrier_lower), _rel(hi, self.barrier_upper))
        touch_low, touch_high = lo <= self.barrier_lower, hi >= self.barrier_upper
        if self.barrier_side > 0:
            label = -1 if touch_low else (1 if touch_high else None)
        else:
            label = -1 if touch_high else (1 if touch_low else None)
        if label is None and t1 >= self.barrier_expiry:
            label = 0
        if label is None:
            return False, 0
        self.barrier_active = False
        return True, label

    def _reward(self, e_before: float, close1: float, hit: bool, label: int, level: int, curiosity: float) -> float:
        """Step 7: base reward × barrier scale − risk − diversity + curiosity, times reward_scale."""
        p = self.p
        ret = (self.equity - e_before) / e_before
        mode = p["reward_mode"]
        if mode == "return":
            base = ret
        elif mode == "pnl":
            base = (self.equity - e_before) / float(p["capital"])
        else:
            a, b = self.dsr_a, self.dsr_b
            da, db = ret - a, ret * ret - b
            var = b - a * a
            self.last_margins["dsr_var"] = abs(var - 1e-12) / max(b, 1e-300)
            base = (b * da - 0.5 * a * db) / var**1.5 if var > 1e-12 else 0.0
            clip = float(p["dsr_clip"])
            base = min(max(base, -clip), clip)
            eta = float(p["dsr_eta"])
            self.dsr_a, self.dsr_b = a + eta * da, b + eta * db
        scale = 0.0
        if hit and label == 1:
            scale = float(p["barrier_profit_scale"])
        elif hit and label == -1:
            scale = float(p["barrier_stop_scale"])
        r = base * (1.0 + scale)
        # exposure against the equity floored at the bust level (a busting step ends the episode)
        floor = max(float(p["bust_fraction"]) * float(p["capital"]), 1e-6 * float(p["capital"]))
        exposure = abs(self.position * close1) / max(self.equity, floor)
        r -= float(p["risk_weight"]) * max(0.0, exposure - float(p["risk_threshold"]))
        r -= self._push_diversity(category(level))
        r += float(p["curiosity_weight"]) * min(max(float(curiosity), 0.0), float(p["curiosity_max"]))
        return r * float(p["reward_scale"])

    def _push_diversity(self, cat: int) -> float:
        """Push a category into the ring; the diversity penalty if the full ring's entropy is low."""
        window = int(self.p["diversity_window"])
        self.diversity_ring.append(cat)
        self.diversity_counts[cat] += 1
        if len(self.diversity_ring) > window:
            self.diversity_counts[self.diversity_ring.pop(0)] -= 1
        if len(self.diversity_ring) < window:
            return 0.0
        ent = -sum((c / window) * math.log2(c / window) for c in self.diversity_counts if c > 0)
        self.last_margins["entropy"] = abs(ent - float(self.p["diversity_threshold"]))
        return float(self.p["diversity_penalty"]) if ent < float(self.p["diversity_threshold"]) else 0.0
