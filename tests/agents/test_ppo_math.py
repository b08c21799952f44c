"""PPO's math against float64 references: GAE (random rewards, dones, truncations), the clipped
loss and its gradient, explained variance."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from foxhunt.agents.ppo.loss import explained_variance, gae, ppo_loss


def gae_reference(reward, value, next_value, done, terminal, gamma, lam):
    """A plain float64 loop, one env at a time, written from the textbook definition."""
    steps, n = reward.shape
    adv = np.zeros((steps, n))
    for i in range(n):
        running = 0.0
        for t in reversed(range(steps)):
            bootstrap = 0.0 if terminal[t, i] else gamma * next_value[t, i]
            delta = reward[t, i] + bootstrap - value[t, i]
            running = delta + (0.0 if done[t, i] else gamma * lam * running)
            adv[t, i] = running
    return adv


@pytest.mark.parametrize("steps,n,gamma,lam", [(1, 3, 0.9, 0.95), (7, 5, 0.99, 0.9), (33, 17, 0.5, 1.0), (16, 8, 0.0, 0.0)])
def test_gae_matches_a_float64_loop_with_dones_and_truncations(steps, n, gamma, lam):
    g = torch.Generator().manual_seed(steps * 31 + n)
    reward = torch.randn(steps, n, generator=g)
    value, next_value = torch.randn(steps, n, generator=g), torch.randn(steps, n, generator=g)
    done = torch.rand(steps, n, generator=g) < 0.2
    truncated = done & (torch.rand(steps, n, generator=g) < 0.5)  # half of the ends are time limits
    terminal = done & ~truncated
    adv = gae(reward, value, next_value, done, terminal, gamma, lam, torch.empty(steps, n))
    ref = gae_reference(*(t.double().numpy() for t in (reward, value, next_value)), done.numpy(), terminal.numpy(), gamma, lam)
    np.testing.assert_allclose(adv.double().numpy(), ref, rtol=1e-5, atol=1e-5)


def test_gae_bootstraps_a_truncated_end_and_not_a_terminal_one():
    reward = torch.tensor([[1.0, 1.0]])
    value = torch.zeros(1, 2)
    next_value = torch.tensor([[10.0, 10.0]])
    done = torch.tensor([[True, True]])
    terminal = torch.tensor([[False, True]])  # env 0 hit the time limit, env 1 ended for real
    adv = gae(reward, value, next_value, done, terminal, 0.5, 0.9, torch.empty(1, 2))
    assert adv.tolist() == [[6.0, 1.0]]


def _loss_reference(logits, value, action, old_logp, old_value, adv, ret, clip, clip_vloss, vf, ent, norm_adv):
    """Float64, written term by term (autograd gives the reference gradient)."""
    logp_all = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    logp = logp_all[torch.arange(len(action)), action]
    entropy = -(logp_all.exp() * logp_all).sum(1).mean()
    ratio = torch.exp(logp - old_logp)
    if norm_adv:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    surr1, surr2 = adv * ratio, adv * torch.clamp(ratio, 1 - clip, 1 + clip)
    pg = -torch.min(surr1, surr2).mean()
    if clip_vloss:
        unclipped = (value - ret) ** 2
        clipped = (old_value + torch.clamp(value - old_value, -clip, clip) - ret) ** 2
        v = 0.5 * torch.max(unclipped, clipped).mean()
    else:
        v = 0.5 * ((value - ret) ** 2).mean()
    return pg - ent * entropy + vf * v, pg, v, entropy


@pytest.mark.parametrize("clip_vloss,norm_adv", [(True, True), (False, False), (True, False)])
def test_clipped_loss_and_its_gradient_match_a_float64_reference(clip_vloss, norm_adv):
    g = torch.Generator().manual_seed(int(clip_vloss) * 2 + int(norm_adv))
    b, a = 37, 5
    logits0 = torch.randn(b, a, generator=g)
    value0 = torch.randn(b, generator=g)
    action = torch.randint(0, a, (b,), generator=g)
    # Old log-probs near the current ones, some far enough that the ratio is clipped.
    old_logp = torch.log_softmax(logits0, 1).gather(1, action[:, None])[:, 0] + 0.4 * torch.randn(b, generator=g)
    old_value = value0 + 0.3 * torch.randn(b, generator=g)
    adv, ret = torch.randn(b, generator=g), torch.randn(b, generator=g)
    kw = dict(clip_coef=0.2, clip_vloss=clip_vloss, vf_coef=0.5, ent_coef=0.01, norm_adv=norm_adv)

    logits, value = logits0.clone().requires_grad_(), value0.clone().requires_grad_()
    out = ppo_loss(logits, value, action, old_logp, old_value, adv, ret, **kw)
    out.loss.backward()

    l64, v64 = logits0.double().requires_grad_(), value0.double().requires_grad_()
    ref, pg, v, ent = _loss_reference(l64, v64, action, old_logp.double(), old_value.double(), adv.double(), ret.double(),
                                      0.2, clip_vloss, 0.5, 0.01, norm_adv)
    ref.backward()
    assert out.loss.item() == pytest.approx(ref.item(), rel=1e-5, abs=1e-6)
    assert (out.pg_loss.item(), out.v_loss.item(), out.entropy.item()) == pytest.approx((pg.item(), v.item(), ent.item()), rel=1e-5, abs=1e-6)
    np.testing.assert_allclose(logits.grad.numpy(), l64.grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(value.grad.numpy(), v64.grad.numpy(), rtol=1e-4, atol=1e-6)
    ratio = torch.exp(torch.log_softmax(logits0.double(), 1).gather(1, action[:, None])[:, 0] - old_logp.double())
    assert 0.0 < out.clip_frac.item() < 1.0  # the test data exercises both sides of the clip
    assert out.clip_frac.item() == pytest.approx(((ratio - 1).abs() > 0.2).double().mean().item())
    assert out.approx_kl.item() == pytest.approx(((ratio - 1) - ratio.log()).mean().item(), rel=1e-4)


def test_explained_variance_is_one_for_perfect_values_and_zero_for_the_mean():
    ret = torch.randn(4, 6)
    assert explained_variance(ret, ret).item() == pytest.approx(1.0)
    assert explained_variance(torch.full_like(ret, ret.mean().item()), ret).item() == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("norm_adv", [True, False])
def test_decided_rows_alone_drive_the_policy_terms_and_every_row_the_value_term(norm_adv):
    # ppo.explore_hold: the policy-gradient, entropy and KL terms are the float64 reference on the
    # decided rows only; the value term is the reference on every row.
    g = torch.Generator().manual_seed(7 + int(norm_adv))
    b, a = 41, 5
    logits0, value0 = torch.randn(b, a, generator=g), torch.randn(b, generator=g)
    action = torch.randint(0, a, (b,), generator=g)
    old_logp = torch.log_softmax(logits0, 1).gather(1, action[:, None])[:, 0] + 0.4 * torch.randn(b, generator=g)
    old_value = value0 + 0.3 * torch.randn(b, generator=g)
    adv, ret = torch.randn(b, generator=g), torch.randn(b, generator=g)
    decided = (torch.rand(b, generator=g) < 0.4).float()
    keep = decided.bool()
    kw = dict(clip_coef=0.2, clip_vloss=True, vf_coef=0.5, ent_coef=0.01, norm_adv=norm_adv)

    logits, value = logits0.clone().requires_grad_(), value0.clone().requires_grad_()
    out = ppo_loss(logits, value, action, old_logp, old_value, adv, ret, decided=decided, **kw)
    out.loss.backward()

    l64, v64 = logits0.double().requires_grad_(), value0.double().requires_grad_()
    _, pg, _, ent = _loss_reference(l64[keep], v64[keep], action[keep], old_logp[keep].double(), old_value[keep].double(),
                                    adv[keep].double(), ret[keep].double(), 0.2, True, 0.5, 0.01, norm_adv)
    _, _, v, _ = _loss_reference(l64, v64, action, old_logp.double(), old_value.double(), adv.double(), ret.double(),
                                 0.2, True, 0.5, 0.01, norm_adv)
    (pg - 0.01 * ent + 0.5 * v).backward()
    assert (out.pg_loss.item(), out.v_loss.item(), out.entropy.item()) == pytest.approx((pg.item(), v.item(), ent.item()), rel=1e-5, abs=1e-6)
    np.testing.assert_allclose(logits.grad.numpy(), l64.grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(value.grad.numpy(), v64.grad.numpy(), rtol=1e-4, atol=1e-6)
    assert not logits.grad[~keep].any()  # a held row moves no logit
    ones = ppo_loss(logits0, value0, action, old_logp, old_value, adv, ret, decided=torch.ones(b), **kw)
    plain = ppo_loss(logits0, value0, action, old_logp, old_value, adv, ret, **kw)
    assert ones.loss.item() == pytest.approx(plain.loss.item(), rel=1e-6)
