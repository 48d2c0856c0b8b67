"""Stage 5: SPLADE training (config, data, losses, regularisers, monitoring, the step, the trainer and its callbacks).

Entry point: :func:`train` with a :class:`TrainConfig` (``spladekit train CONFIG.yaml`` on the CLI).
"""

from spladekit.train.config import TrainConfig, load_config
from spladekit.train.regularizers import QuadraticWarmup, flops_regularizer, l1_regularizer
from spladekit.train.trainer import TrainResult, train

__all__ = [
    "TrainConfig",
    "TrainResult",
    "load_config",
    "train",
    "flops_regularizer",
    "l1_regularizer",
    "QuadraticWarmup",
]
