"""PPO end-to-end throughput (collection + update), side by side in one run.

Env-steps/s of whole PPO iterations (a rollout of T lockstep steps of N envs, GAE, and
``update_epochs`` × ``minibatches`` gradient steps over it) at N = 4K, 16K and 64K envs, the same
network and hyperparameters in every row:

* ``foxhunt``: PPOTrainer (rollout and update each one captured CUDA graph, no host reads inside an
  epoch, one readback per epoch); ``foxhunt-fused``: the same with the fused Triton env step;
  ``foxhunt-eager``: no graphs (at 4K only).
* ``cleanrl``: a plain-PyTorch PPO written the common way (CleanRL's ppo.py structure, written here
  from scratch) over the same VecTradingEnv on the same device: observations stored [T, N, D],
  ``torch.distributions.Categorical``, ``torch.optim.Adam``, ``clip_grad_norm_``, ``randperm``
  minibatches, the per-minibatch ``clipfrac.item()`` and the host-side target-KL break.
* ``sb3``: Stable-Baselines3 PPO through the Gymnasium wrapper (``TradingEnv`` in a DummyVecEnv of
  ``--sb3-envs`` envs on a CPU copy of the market: SB3 steps envs one by one on the host), for
  ``--sb3-steps`` env steps; skipped with a note when stable_baselines3 is not importable.

    PYTHONPATH=src:. python -m bench.bench_ppo            # on the GPU: bench/results/ppo_cuda.json
    PYTHONPATH=src:. python -m bench.bench_ppo --quick    # tiny sizes on the CPU (checks the harness)
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from bench.common import arguments, build_market, machine, own_args, parse, record_row, save, stopwatch

from foxhunt.agents.exec_choice import ExecChoice
from foxhunt.agents.networks import ActorCritic
from foxhunt.agents.ppo.config import PPOConfig
from foxhunt.agents.ppo.trainer import PPOTrainer
from foxhunt.env import EnvParams, VecTradingEnv
from foxhunt.market import MarketData

PARAMS = EnvParams(episode_length=256, action_mode="exposure", reward_scale=100.0)


def bench_foxhunt(market: MarketData, n: int, a: argparse.Namespace, graphs: bool, fused: bool) -> dict:
    cfg = PPOConfig(n_envs=n, rollout_len=a.rollout, iterations_per_epoch=a.iterations, update_epochs=a.update_epochs,
                    minibatches=a.minibatches, hidden=a.hidden, head_hidden=a.head_hidden, target_kl=a.target_kl)
    tr = PPOTrainer(market, PARAMS, cfg, seed=0, choice=ExecChoice(cuda_graphs=graphs, env_step="fused" if fused else "torch"))
    tr.reset_for_fold(market.fold)
    with stopwatch(market.device) as setup:
        tr.train_epoch()  # warm-up: eager first calls + graph capture (+ Triton compile)
    with stopwatch(market.device) as timed:
        s = tr.train_epoch()  # one readback (it waits for the epoch's device work)
    sec = timed.s
    steps = n * a.rollout * a.iterations
    return {"impl": f"foxhunt{'-fused' if fused else ''}{'' if graphs else '-eager'}", "n_envs": n, "seconds": sec,
            "env_steps": steps, "env_steps_per_s": steps / sec, "setup_s": setup.s,
            "updates_per_iteration": a.update_epochs * a.minibatches, "kl_stopped": s["kl_stopped"]}


class CleanRLStylePPO:
    """PPO the common way over the same device env (see the module docstring)."""

    def __init__(self, market: MarketData, n: int, a: argparse.Namespace) -> None:
        dev = market.device
        self.a, self.dev, self.n = a, dev, n
        self.env = VecTradingEnv(market, n, PARAMS, seed=0)
        self.env.reset()
        torch.manual_seed(0)
        self.net = ActorCritic(market.obs_dim, self.env.n_actions, a.hidden, a.head_hidden).to(dev)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=3e-4, eps=1e-5)
        t, d = a.rollout, market.obs_dim
        self.obs = torch.zeros((t, n, d), device=dev)
        self.actions = torch.zeros((t, n), dtype=torch.int64, device=dev)
        self.logprobs, self.rewards, self.values = (torch.zeros((t, n), device=dev) for _ in range(3))
        self.dones = torch.zeros((t, n), device=dev)

    def iteration(self) -> None:
        a, net, env = self.a, self.net, self.env
        next_done = torch.zeros(self.n, device=self.dev)
        for step in range(a.rollout):
            obs = env.observe().clone()
            self.obs[step] = obs
            self.dones[step] = next_done
            with torch.no_grad():
                logits, value = net(obs)
                dist = torch.distributions.Categorical(logits=logits)
                action = dist.sample()
            self.actions[step], self.logprobs[step], self.values[step] = action, dist.log_prob(action), value
            out = env.step(action)
            self.rewards[step] = out.reward
            next_done = out.done.float()
        with torch.no_grad():
            next_value = net(env.observe())[1]
            adv = torch.zeros_like(self.rewards)
            lastgaelam = torch.zeros(self.n, device=self.dev)
            for t in reversed(range(a.rollout)):
                if t == a.rollout - 1:
                    nextnonterminal, nextvalues = 1.0 - next_done, next_value
                else:
                    nextnonterminal, nextvalues = 1.0 - self.dones[t + 1], self.values[t + 1]
                delta = self.rewards[t] + 0.9 * nextvalues * nextnonterminal - self.values[t]
                adv[t] = lastgaelam = delta + 0.9 * 0.95 * nextnonterminal * lastgaelam
            returns = adv + self.values
        b_obs, b_act = self.obs.reshape(-1, self.obs.shape[-1]), self.actions.reshape(-1)
        b_logp, b_adv, b_ret, b_val = self.logprobs.reshape(-1), adv.reshape(-1), returns.reshape(-1), self.values.reshape(-1)
        rows = a.rollout * self.n
        mb = rows // a.minibatches
        clipfracs = []
        for _ in range(a.update_epochs):
            inds = torch.randperm(rows, device=self.dev)
            for start in range(0, rows, mb):
                idx = inds[start:start + mb]
                logits, newvalue = net(b_obs[idx])
                dist = torch.distributions.Categorical(logits=logits)
                newlogprob, entropy = dist.log_prob(b_act[idx]), dist.entropy()
                logratio = newlogprob - b_logp[idx]
                ratio = logratio.exp()
                with torch.no_grad():
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfracs.append(((ratio - 1.0).abs() > 0.2).float().mean().item())
                mb_adv = b_adv[idx]
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                pg_loss = torch.max(-mb_adv * ratio, -mb_adv * torch.clamp(ratio, 0.8, 1.2)).mean()
                v_unclipped = (newvalue - b_ret[idx]) ** 2
                v_clipped = b_val[idx] + torch.clamp(newvalue - b_val[idx], -0.2, 0.2)
                v_loss = 0.5 * torch.max(v_unclipped, (v_clipped - b_ret[idx]) ** 2).mean()
                loss = pg_loss - 0.01 * entropy.mean() + 0.5 * v_loss
                self.opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(net.parameters(), 0.5)
                self.opt.step()
            if self.a.target_kl is not None and approx_kl > self.a.target_kl:
                break


def bench_cleanrl(market: MarketData, n: int, a: argparse.Namespace) -> dict:
    ppo = CleanRLStylePPO(market, n, a)
    with stopwatch(market.device) as setup:
        ppo.iteration()
    with stopwatch(market.device) as timed:
        for _ in range(a.iterations):
            ppo.iteration()
    sec = timed.s
    steps = n * a.rollout * a.iterations
    return {"impl": "cleanrl", "n_envs": n, "seconds": sec, "env_steps": steps, "env_steps_per_s": steps / sec,
            "setup_s": setup.s, "updates_per_iteration": a.update_epochs * a.minibatches}


def bench_sb3(a: argparse.Namespace) -> dict:
    try:
        from stable_baselines3 import PPO
        from stable_baselines3.common.vec_env import DummyVecEnv
    except ImportError as exc:
        return {"impl": "sb3", "skipped": f"stable_baselines3 is not importable: {exc}"}
    from foxhunt.env.gym_wrapper import TradingEnv

    market = build_market(5_000, 51, torch.device("cpu"), seed=1, val_gap=10)
    k = a.sb3_envs
    venv = DummyVecEnv([lambda i=i: TradingEnv(market, PARAMS, seed=i) for i in range(k)])
    n_steps = max(2, a.rollout)
    model = PPO("MlpPolicy", venv, n_steps=n_steps, batch_size=max(2, k * n_steps // a.minibatches), n_epochs=a.update_epochs,
                gamma=0.9, policy_kwargs={"net_arch": list(a.hidden)}, device="cpu", seed=0, verbose=0)
    from foxhunt.scorecard.baselines import silence_logger

    silence_logger(model)
    with stopwatch() as sw:
        model.learn(total_timesteps=a.sb3_steps)
    sec = sw.s
    steps = int(model.num_timesteps)
    return {"impl": "sb3", "n_envs": k, "seconds": sec, "env_steps": steps, "env_steps_per_s": steps / sec,
            "note": "DummyVecEnv of TradingEnv (Gymnasium wrapper) on a CPU copy of the market; policy on the CPU"}


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--sizes", default="", help="comma-separated N (default 4096,16384,65536)")
    ap.add_argument("--rollout", type=int, default=16)
    ap.add_argument("--iterations", type=int, default=8, help="timed iterations (one epoch of ours)")
    ap.add_argument("--update-epochs", type=int, default=4)
    ap.add_argument("--minibatches", type=int, default=4)
    ap.add_argument("--hidden", default="64,64")
    ap.add_argument("--head-hidden", type=int, default=32)
    ap.add_argument("--target-kl", type=float, default=None)
    ap.add_argument("--impls", default="foxhunt,foxhunt-fused,foxhunt-eager,cleanrl,sb3")
    ap.add_argument("--sb3-envs", type=int, default=16)
    ap.add_argument("--sb3-steps", type=int, default=20_000)
    a = parse(ap)
    a.hidden = tuple(int(x) for x in a.hidden.split(","))
    dev = a.dev
    torch.backends.cuda.matmul.allow_tf32 = True
    sizes = [int(x) for x in a.sizes.split(",")] if a.sizes else ([16, 64] if a.quick else [4096, 16_384, 65_536])
    if a.quick:
        a.iterations, a.sb3_steps, a.sb3_envs = 2, 256, 4
    impls = a.impls.split(",")
    name = f"ppo_{dev.type}{'_quick' if a.quick else ''}"
    res: dict = {"machine": machine(dev), "config": own_args(a, keep=("quick",)), "rows": [], "errors": []}
    market = build_market(20_000 if a.quick else 400_000, 51, dev, seed=1, val_gap=10)

    def guarded(fn, *args) -> None:
        r = record_row(res, fn, *args)
        if r is not None:
            print(r, flush=True)
            save(a, name, res)  # partial results survive a timeout

    for n in sizes:
        if "foxhunt" in impls:
            guarded(bench_foxhunt, market, n, a, True, False)
        if "foxhunt-fused" in impls and dev.type == "cuda":
            guarded(bench_foxhunt, market, n, a, True, True)
        if "foxhunt-eager" in impls and (n == sizes[0]):
            guarded(bench_foxhunt, market, n, a, False, False)
        if "cleanrl" in impls:
            guarded(bench_cleanrl, market, n, a)
    if "sb3" in impls:
        guarded(lambda *_: bench_sb3(a), None)
    path = save(a, name, res)
    print(f"\nPPO end-to-end on {res['machine'].get('gpu', dev.type)} -> {path}")
    print(f"{'impl':>16} {'N envs':>8} {'env-steps/s':>14}")
    for r in res["rows"]:
        print(f"{r['impl']:>16} {r.get('n_envs', '-'):>8} {r.get('env_steps_per_s', float('nan')):>14,.0f} {r.get('skipped', '')}")
    base = {r["n_envs"]: r["env_steps_per_s"] for r in res["rows"] if r["impl"] == "cleanrl"}
    for r in res["rows"]:
        if r["impl"].startswith("foxhunt") and r["n_envs"] in base:
            print(f"{r['impl']} / cleanrl at {r['n_envs']}: {r['env_steps_per_s'] / base[r['n_envs']]:.1f}×")
    if res["errors"]:
        print("errors:", *res["errors"], sep="\n  ")


if __name__ == "__main__":
    main()
