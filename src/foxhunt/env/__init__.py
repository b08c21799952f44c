"""Trading environments: vectorised device env (structure of arrays), its parameters and actions,
and Gymnasium wrappers. The float64 oracle lives in ``foxhunt.env.reference`` (imported lazily)."""

from foxhunt.env.actions import N_EXPOSURE_ACTIONS, N_FACTORED_ACTIONS, decode, n_actions
from foxhunt.env.params import EnvConfigError, EnvParams, EnvTensors, check_episode_length
from foxhunt.env.state import (
    RESET_ALL,
    RESET_DIVERSITY,
    RESET_DSR,
    RESET_KELLY,
    RESET_PORTFOLIO,
    RESET_VOL,
    EnvState,
    apply_reset_flags_,
)
from foxhunt.env.graph import StepGraph
from foxhunt.env.state import StartSampler
from foxhunt.env.vec_env import StepOutput, VecTradingEnv, observe, reset, step

__all__ = [
    "EnvConfigError",
    "EnvParams",
    "EnvState",
    "EnvTensors",
    "N_EXPOSURE_ACTIONS",
    "N_FACTORED_ACTIONS",
    "RESET_ALL",
    "RESET_DIVERSITY",
    "RESET_DSR",
    "RESET_KELLY",
    "RESET_PORTFOLIO",
    "RESET_VOL",
    "StartSampler",
    "StepGraph",
    "StepOutput",
    "VecTradingEnv",
    "apply_reset_flags_",
    "check_episode_length",
    "decode",
    "n_actions",
    "observe",
    "reset",
    "step",
]
