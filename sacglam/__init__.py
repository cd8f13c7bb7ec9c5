"""sacglam: SAC-GLAM (Soft Actor-Critic with hindsight relabeling for LLM agents) and the PPO-GLAM
baseline on a Ray actor-learner pipeline.

Subpackages: `envs` (Playground-Text), `rollout_workers`, `replay_actor`, `learner`. Shared data
types live in `sacglam.types`, configuration in `sacglam.config`.
"""

__version__ = "0.1.0"
