"""PPO's math as pure tensor functions: GAE(λ) over a rollout and the clipped surrogate loss.

Both run on the device with fixed shapes and no host reads (captured in CUDA graphs by the
learner); tests/agents/test_ppo_math.py holds them to float64 loops and a float64 autograd
reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def gae(reward: torch.Tensor, value: torch.Tensor, next_value: torch.Tensor, done: torch.Tensor,
        terminal: torch.Tensor, gamma: float, lam: float, adv_out: torch.Tensor) -> torch.Tensor:
    """Generalised advantage estimates of a rollout, written into ``adv_out``; returns it.

    reward, value [T, N] float32: r_t and V(s_t); next_value [T, N]: V of the state reached by step
    t *before* any auto-reset (s'_t); done [T, N] bool: the episode ended at step t (terminal or
    truncated); terminal [T, N] bool: it ended for real (not by the time limit).

        δ_t = r_t + γ · V(s'_t) · (1 − terminal_t) − V(s_t)
        A_t = δ_t + γ λ · (1 − done_t) · A_{t+1}        (A_T = 0)

    A time-limit end (done, not terminal) bootstraps from V(s'_t) and cuts the recursion, exactly
    as the DQN target does; the last step bootstraps from V(s'_{T-1}). Returns = A + V.
    """
    steps = reward.shape[0]
    keep = (~terminal).to(reward.dtype)
    carry = (~done).to(reward.dtype) * (gamma * lam)
    delta = reward + gamma * next_value * keep - value
    last = torch.zeros_like(reward[0])
    for t in range(steps - 1, -1, -1):
        last = delta[t] + carry[t] * last
        adv_out[t].copy_(last)
    return adv_out


@dataclass
class PPOLosses:
    """0-d tensors of one minibatch. ``loss`` carries the gradient; the rest are detached."""

    loss: torch.Tensor
    pg_loss: torch.Tensor
    v_loss: torch.Tensor
    entropy: torch.Tensor
    approx_kl: torch.Tensor
    clip_frac: torch.Tensor


def ppo_loss(logits: torch.Tensor, value: torch.Tensor, action: torch.Tensor, old_logp: torch.Tensor,
             old_value: torch.Tensor, adv: torch.Tensor, ret: torch.Tensor, *, clip_coef: float, clip_vloss: bool,
             vf_coef: float, ent_coef: float, norm_adv: bool, decided: torch.Tensor | None = None) -> PPOLosses:
    """The PPO objective of one minibatch (to be minimised).

    logits [B, A], value [B]: the current network on the minibatch; action [B] int64, old_logp [B],
    old_value [B], adv [B], ret [B]: from the rollout. With r = exp(logp − old_logp):

        pg   = mean(max(−Â·r, −Â·clip(r, 1 − c, 1 + c)))       Â: adv, normalised when norm_adv
        v    = ½ · mean(max((V − R)², (old_V + clip(V − old_V, −c, c) − R)²))   (clip_vloss)
               ½ · mean((V − R)²)                                          (otherwise)
        loss = pg − ent_coef · mean(entropy) + vf_coef · v

    approx_kl = mean((r − 1) − log r) (the low-variance estimator); clip_frac = mean(|r − 1| > c).

    decided [B] (0 / 1, ``ppo.explore_hold``): the rows where the policy chose its action. Then pg,
    entropy, approx_kl, clip_frac and the advantage normalisation are means over those rows only (a
    held action was not sampled from the policy: no ratio of it is an estimate of anything); v stays
    a mean over every row. None: every row (the plain means above).
    """
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(1, action.unsqueeze(1)).squeeze(1)
    if decided is None:
        mean = torch.mean
    else:
        n_decided = decided.sum().clamp_min(1.0)
        mean = lambda x: (x * decided).sum() / n_decided  # noqa: E731
    entropy = mean(-(logp_all.exp() * logp_all).sum(-1))
    log_ratio = logp - old_logp
    ratio = log_ratio.exp()
    if norm_adv:
        if decided is None:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        else:  # the decided rows' mean and (unbiased) std
            mu = mean(adv)
            sd = ((((adv - mu) ** 2) * decided).sum() / (n_decided - 1.0).clamp_min(1.0)).sqrt()
            adv = (adv - mu) / (sd + 1e-8)
    pg = mean(torch.maximum(-adv * ratio, -adv * ratio.clamp(1.0 - clip_coef, 1.0 + clip_coef)))
    if clip_vloss:
        v_clipped = old_value + (value - old_value).clamp(-clip_coef, clip_coef)
        v = 0.5 * torch.maximum((value - ret) ** 2, (v_clipped - ret) ** 2).mean()
    else:
        v = 0.5 * ((value - ret) ** 2).mean()
    loss = pg - ent_coef * entropy + vf_coef * v
    with torch.no_grad():
        approx_kl = mean((ratio - 1.0) - log_ratio)
        clip_frac = mean(((ratio - 1.0).abs() > clip_coef).float())
    return PPOLosses(loss, pg.detach(), v.detach(), entropy.detach(), approx_kl, clip_frac)


def explained_variance(value: torch.Tensor, ret: torch.Tensor) -> torch.Tensor:
    """1 − Var(R − V) / Var(R) over all elements (0-d; NaN when Var(R) = 0)."""
    v, r = value.reshape(-1).double(), ret.reshape(-1).double()
    var_r = r.var(unbiased=False)
    return (1.0 - (r - v).var(unbiased=False) / var_r).float()
