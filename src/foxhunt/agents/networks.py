"""Networks: the dueling Q-network and the curiosity forward model.

Both are plain ``nn.Module`` stacks so that their forward passes batch over thousands of envs on the
tensor cores; weights can be re-homed into one flat buffer (``foxhunt.agents.flat``) so that the
optimiser, the guard and the target update are a handful of whole-buffer operations.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

from foxhunt.accel.backend import FUSED_MAX_WIDTH

N_FACTORED_ACTIONS = 45
N_EXPOSURE_ACTIONS = 5
N_CATEGORIES = 3  # short / flat / long


def _mlp(sizes: Sequence[int], slope: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.LeakyReLU(slope)]
    return nn.Sequential(*layers)


class DuelingQNet(nn.Module):
    """Dueling Q-network: Q(s, a) = V(s) + A(s, a) − mean_a A(s, a).

    Default shape (the original design): 54 → 256 → 256 → {128 → 1, 128 → 45}, LeakyReLU(0.01).
    obs: [B, obs_dim] float32 → Q: [B, n_actions] float32.
    """

    def __init__(
        self,
        obs_dim: int,
        n_actions: int = N_FACTORED_ACTIONS,
        hidden: Sequence[int] = (256, 256),
        head_hidden: int = 128,
        slope: float = 0.01,
    ) -> None:
        super().__init__()
        self.obs_dim = obs_dim
        self.n_actions = n_actions
        self.trunk = _mlp([obs_dim, *hidden], slope)
        self.value = nn.Sequential(nn.Linear(hidden[-1], head_hidden), nn.LeakyReLU(slope), nn.Linear(head_hidden, 1))
        self.advantage = nn.Sequential(
            nn.Linear(hidden[-1], head_hidden), nn.LeakyReLU(slope), nn.Linear(head_hidden, n_actions)
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        h = self.trunk(obs)
        adv = self.advantage(h)
        return self.value(h) + adv - adv.mean(dim=-1, keepdim=True)


BRANCHES = (5, 3, 3)
"""The factored action's sub-actions (exposure level, order type, urgency): action = 9 e + 3 o + u
(``env.actions.decode_factored``), so the joint index is row-major over these branches."""


class BranchingQNet(nn.Module):
    """Action-branching dueling Q-network for the 45 factored actions (``dqn.head = "branching"``).

    One shared trunk and value head V(s), and one advantage branch per sub-action (exposure 5, order
    type 3, urgency 3), each ``hidden[-1] → head_hidden → n_b``:

        Q(s, a) = V(s) + Σ_b (A_b(s, a_b) − mean_j A_b(s, j)),   a = (a_0, a_1, a_2)

    forward returns the joint Q [B, 45] (action = 9 a_0 + 3 a_1 + a_2), so acting, double-DQN targets
    and the backtests use it like a flat head's Q. Q is separable, so the joint argmax is the
    per-branch argmax (``greedy``; ties: both take the first maximal index). The same trunk, value
    head and LeakyReLU as ``DuelingQNet``; shapes obs [B, obs_dim] float32 → Q [B, 45] float32.
    """

    def __init__(self, obs_dim: int, hidden: Sequence[int] = (256, 256), head_hidden: int = 128, slope: float = 0.01,
                 branches: Sequence[int] = BRANCHES) -> None:
        super().__init__()
        self.obs_dim = obs_dim
        self.branch_sizes = tuple(int(n) for n in branches)
        self.n_actions = math.prod(self.branch_sizes)
        self.trunk = _mlp([obs_dim, *hidden], slope)
        self.value = nn.Sequential(nn.Linear(hidden[-1], head_hidden), nn.LeakyReLU(slope), nn.Linear(head_hidden, 1))
        self.branches = nn.ModuleList(
            nn.Sequential(nn.Linear(hidden[-1], head_hidden), nn.LeakyReLU(slope), nn.Linear(head_hidden, n))
            for n in self.branch_sizes)

    def branch_advantages(self, obs: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """(V [B, 1], centred advantages A_b − mean A_b, one [B, n_b] per branch)."""
        h = self.trunk(obs)
        advs = [a - a.mean(dim=-1, keepdim=True) for a in (br(h) for br in self.branches)]
        return self.value(h), advs

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        v, advs = self.branch_advantages(obs)
        k = len(advs)
        q = v.view(-1, *([1] * k))
        for b, a in enumerate(advs):  # branch b along its own axis of the joint [B, 5, 3, 3] grid
            q = q + a.view(-1, *([1] * b), a.shape[1], *([1] * (k - b - 1)))
        return q.reshape(obs.shape[0], self.n_actions)

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """Greedy joint actions [B] int64 from the per-branch argmaxes (equal to Q.argmax(1))."""
        _, advs = self.branch_advantages(obs)
        action = torch.zeros(obs.shape[0], dtype=torch.int64, device=obs.device)
        for a in advs:
            action = action * a.shape[1] + a.argmax(dim=1)
        return action


def q_network(head: str, obs_dim: int, n_actions: int, hidden: Sequence[int], head_hidden: int) -> nn.Module:
    """The DQN Q-network of ``dqn.head``: "flat" (``DuelingQNet``, any action count) or "branching"
    (``BranchingQNet``, the 45 factored actions only: ValueError otherwise)."""
    if head == "branching":
        if n_actions != N_FACTORED_ACTIONS:
            raise ValueError(f"dqn.head = 'branching' needs the {N_FACTORED_ACTIONS} factored actions "
                             f"(env.action_mode = 'factored'); this env has {n_actions}")
        return BranchingQNet(obs_dim, hidden, head_hidden)
    return DuelingQNet(obs_dim, n_actions, hidden, head_hidden)


def head_of(net: nn.Module) -> str:
    """"branching" for a BranchingQNet, else "flat" (a model file records it)."""
    return "branching" if isinstance(net, BranchingQNet) else "flat"


def action_bias_(net: nn.Module, action: int, value: float) -> None:
    """Add ``value`` to the output bias that favours ``action`` (in place): the advantage head's
    entry of a DuelingQNet; each branch's entry of its sub-action in a BranchingQNet."""
    with torch.no_grad():
        if isinstance(net, BranchingQNet):
            for br, sub in zip(net.branches, _sub_actions(action, net.branch_sizes)):
                br[-1].bias[sub] += value
        else:
            net.advantage[-1].bias[action] += value


def _sub_actions(action: int, sizes: Sequence[int]) -> list[int]:
    out = []
    for n in reversed(sizes):
        out.append(action % n)
        action //= n
    return out[::-1]


class CuriosityModel(nn.Module):
    """Forward model: (32 state features ++ 3-way action one-hot) → 64 → 32 predicted next features.

    Its squared prediction error on a transition is the curiosity bonus (novel transitions are
    poorly predicted). state, next_state: [B, 32]; category: [B] int64 in {0 short, 1 flat, 2 long}.
    """

    def __init__(self, n_state: int = 32, hidden: int = 64, slope: float = 0.01) -> None:
        super().__init__()
        self.n_state = n_state
        self.net = nn.Sequential(
            nn.Linear(n_state + N_CATEGORIES, hidden), nn.LeakyReLU(slope), nn.Linear(hidden, n_state)
        )

    def forward(self, state: torch.Tensor, category: torch.Tensor) -> torch.Tensor:
        one_hot = torch.nn.functional.one_hot(category, N_CATEGORIES).to(state.dtype)
        return self.net(torch.cat([state, one_hot], dim=-1))

    def error(self, state: torch.Tensor, category: torch.Tensor, next_state: torch.Tensor) -> torch.Tensor:
        """Mean squared prediction error per row: [B]."""
        return (self(state, category) - next_state).pow(2).mean(dim=-1)


def action_category(actions: torch.Tensor, n_actions: int) -> torch.Tensor:
    """Short / flat / long category of factored (45) or exposure (5) actions: [B] int64."""
    exposure = actions // 9 if n_actions == N_FACTORED_ACTIONS else actions
    return (exposure >= 2).long() + (exposure >= 3).long()




def _linear_stack(seq: nn.Module) -> tuple[list[nn.Linear], list[float]] | None:
    """(Linear layers, LeakyReLU slopes) of a Linear/LeakyReLU Sequential, else None."""
    lins, slopes = [], []
    for mod in seq.children():
        if type(mod) is nn.Linear:
            lins.append(mod)
        elif type(mod) is nn.LeakyReLU:
            slopes.append(float(mod.negative_slope))
        else:
            return None
    return lins, slopes


def fused_net_unsupported(net: nn.Module, obs_dim: int, n_actions: int) -> str | None:
    """Why the fused dueling-MLP kernels (acting, backtest) cannot run ``net`` (None when they can).

    The one set of network rules both kernels share: a DuelingQNet (forward not overridden) of two
    trunk layers and Linear-LeakyReLU-Linear heads, one LeakyReLU slope, obs_dim → n_actions as the
    env needs, every width (incl. n_actions + 1 outputs) at most ``FUSED_MAX_WIDTH``, float32."""
    if not isinstance(net, DuelingQNet) or type(net).forward is not DuelingQNet.forward:
        return f"the network is a {type(net).__name__}, not a DuelingQNet"
    parts = [_linear_stack(net.trunk), _linear_stack(net.value), _linear_stack(net.advantage)]
    if any(p is None for p in parts):
        return "the DuelingQNet holds layers other than Linear and LeakyReLU"
    (trunk, s_t), (value, s_v), (adv, s_a) = parts  # type: ignore[misc]
    if len(trunk) != 2 or len(s_t) != 2 or len(value) != 2 or len(adv) != 2 or len(s_v) != 1 or len(s_a) != 1:
        return "the fused kernels need two trunk layers (dqn.hidden of length 2) and Linear-LeakyReLU-Linear heads"
    if len(set(s_t + s_v + s_a)) != 1:
        return "the fused kernels need one LeakyReLU slope for every layer"
    if net.obs_dim != obs_dim or adv[1].out_features != n_actions:
        return f"the network maps {net.obs_dim} → {adv[1].out_features}, the env needs {obs_dim} → {n_actions}"
    widest = max(obs_dim, trunk[0].out_features, trunk[1].out_features, 2 * value[0].out_features, n_actions + 1)
    if widest > FUSED_MAX_WIDTH:
        return f"layers wider than {FUSED_MAX_WIDTH} units"
    if any(p.dtype != torch.float32 for p in net.parameters()):
        return "the network's parameters are not float32"
    return None


def _stack_names(net: nn.Module) -> tuple[str, ...]:
    """The Linear/LeakyReLU stacks of a Q-network, trunk first, in parameter order."""
    if isinstance(net, BranchingQNet):
        return ("trunk", "value", *(f"branches.{b}" for b in range(len(net.branches))))
    return ("trunk", "value", "advantage")


def merge_mean(nets: Sequence[nn.Module], weights: Sequence[float] | None = None) -> nn.Module:
    """One Q-network whose Q is the weighted mean of K members' Q-values (a mean-Q ensemble).

    Members are DuelingQNets, or BranchingQNets, of one architecture (obs_dim, n_actions, trunk
    widths, head_hidden, slope); the merged net is of the same class and K times as wide: the first
    layer of every stack concatenates the members' rows, the inner layers are block-diagonal (member
    k's units see only member k's units), and each head's output layer concatenates the members'
    columns scaled by their weight, biases weighted alike. Since the dueling combination V + A −
    mean_a A (and the branching one, V + Σ_b (A_b − mean A_b)) is linear in the head outputs, the
    merged Q equals Σ_k w_k Q_k exactly (up to float32 summation order). So anything that runs one
    such network (model files, ``foxhunt backtest``, the fused backtest kernel for DuelingQNets while
    K × width fits) runs the ensemble. weights: K non-negative, not all zero (normalised to sum 1);
    None: equal. Returns a detached eval-mode copy on the members' device.
    """
    if not nets:
        raise ValueError("merge_mean needs at least one network")
    w = torch.ones(len(nets), dtype=torch.float64) if weights is None else torch.as_tensor(list(weights), dtype=torch.float64)
    if w.shape != (len(nets),) or bool((w < 0).any()) or float(w.sum()) <= 0:
        raise ValueError("merge_mean weights: one non-negative weight per network, not all zero")
    w = w / w.sum()
    first = nets[0]
    copy = getattr(first, "detached_copy", None)  # a network that reads more than the observation (SequenceQNet)
    if copy is not None:
        if len(nets) != 1:
            raise ValueError(f"merge_mean: a {type(first).__name__} merges only as one network (an ensemble of them is not supported)")
        return copy()
    kind = type(first)
    if kind not in (DuelingQNet, BranchingQNet) or any(type(n) is not kind for n in nets):
        raise ValueError("merge_mean: the networks must be DuelingQNets (or BranchingQNets) of one architecture "
                         "(Linear/LeakyReLU stacks)")
    names = _stack_names(first)
    stacks = [tuple(_linear_stack(n.get_submodule(name)) for name in names) for n in nets]
    shapes = {tuple(tuple(l.weight.shape) for part in st for l in part[0]) if all(st) else None for st in stacks}
    slopes = {sl for st in stacks if all(st) for part in st for sl in part[1]}
    if None in shapes or len(shapes) != 1 or len(slopes) > 1:
        raise ValueError("merge_mean: the networks must be DuelingQNets (or BranchingQNets) of one architecture "
                         "(Linear/LeakyReLU stacks)")
    trunk, value = stacks[0][0], stacks[0][1]
    hidden = [l.out_features * len(nets) for l in trunk[0]]
    head_hidden = value[0][0].out_features * len(nets)
    slope = slopes.pop() if slopes else 0.01
    merged = (BranchingQNet(first.obs_dim, hidden, head_hidden, slope, first.branch_sizes) if kind is BranchingQNet
              else DuelingQNet(first.obs_dim, first.n_actions, hidden, head_hidden, slope))
    merged = merged.to(next(first.parameters()).device)
    with torch.no_grad():
        for part, name in enumerate(names):
            for i, lin in enumerate(_linear_stack(merged.get_submodule(name))[0]):
                lin.weight.zero_()
                lin.bias.zero_()
                reads_obs = part == 0 and i == 0  # the trunk's first layer: every member reads the same obs
                output = part > 0 and i == 1  # a head's output layer: members' column blocks, weighted
                r = c = 0
                for k, st in enumerate(stacks):
                    m = st[part][0][i]
                    rows, cols = m.weight.shape
                    if output:
                        lin.weight[:, c:c + cols] = m.weight * float(w[k])
                        lin.bias += m.bias * float(w[k])
                    else:
                        lin.weight[r:r + rows, (0 if reads_obs else c):(0 if reads_obs else c) + cols] = m.weight
                        lin.bias[r:r + rows] = m.bias
                    r, c = r + rows, c + cols
    return merged.eval()


class ActorCritic(nn.Module):
    """PPO's actor-critic: trunk → {policy head → logits [B, A], value head → V [B]}.

    Shapes mirror ``DuelingQNet`` (the policy head stands where the advantage head is): trunk
    ``obs_dim → hidden…`` with LeakyReLU, heads ``hidden[-1] → head_hidden → {n_actions | 1}``.
    ``shared_trunk=False`` gives the critic its own trunk of the same widths. Orthogonal
    initialisation (trunk gain √2, policy output 0.01: a near-uniform first policy, value output 1).

    ``greedy_net()`` packs the actor as a ``DuelingQNet`` whose value head is zero, so that its
    "Q" is ``logits − mean(logits)``: argmax and softmax are exactly the policy's, and everything
    that runs a DuelingQNet (model files, ``foxhunt backtest``, the fused backtest kernel) runs the
    actor unchanged.
    """

    def __init__(self, obs_dim: int, n_actions: int = N_FACTORED_ACTIONS, hidden: Sequence[int] = (256, 256),
                 head_hidden: int = 128, shared_trunk: bool = True, slope: float = 0.01) -> None:
        super().__init__()
        self.obs_dim, self.n_actions = obs_dim, n_actions
        self.hidden, self.head_hidden, self.slope = tuple(hidden), head_hidden, slope
        self.trunk = _mlp([obs_dim, *hidden], slope)
        self.critic_trunk = None if shared_trunk else _mlp([obs_dim, *hidden], slope)
        self.policy = nn.Sequential(nn.Linear(hidden[-1], head_hidden), nn.LeakyReLU(slope), nn.Linear(head_hidden, n_actions))
        self.value = nn.Sequential(nn.Linear(hidden[-1], head_hidden), nn.LeakyReLU(slope), nn.Linear(head_hidden, 1))
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.orthogonal_(m.weight, gain=2 ** 0.5)
                nn.init.zeros_(m.bias)
        nn.init.orthogonal_(self.policy[2].weight, gain=0.01)
        nn.init.orthogonal_(self.value[2].weight, gain=1.0)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """obs [B, obs_dim] → (logits [B, n_actions], value [B])."""
        h = self.trunk(obs)
        hv = h if self.critic_trunk is None else self.critic_trunk(obs)
        return self.policy(h), self.value(hv).squeeze(-1)

    def greedy_net(self) -> DuelingQNet:
        """A detached DuelingQNet copy whose Q = logits − mean(logits) (value head zero)."""
        net = DuelingQNet(self.obs_dim, self.n_actions, self.hidden, self.head_hidden, self.slope)
        net = net.to(next(self.parameters()).device)
        with torch.no_grad():
            net.trunk.load_state_dict(self.trunk.state_dict())
            net.advantage.load_state_dict(self.policy.state_dict())
            for p in net.value.parameters():
                p.zero_()
        return net.eval()
