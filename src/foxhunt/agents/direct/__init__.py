"""Direct reinforcement (``train.agent = "direct"``): a policy trained by gradient ascent on the net
P&L objective of its own positions, with the env's costs inside (Moody & Saffell; Lim, Zohren &
Roberts). config ([direct]), pnl (the env's execution, differentiable), objective, policy (and its
greedy DuelingQNet), learner (the captured gradient step), trainer (the runner's interface), checks."""
