"""Learners: discrete SAC losses as pure functions (`sac_losses`) and the SAC-GLAM learner that
owns the optimizers (`sac`). PPO-GLAM and the Ray learner actors come with issues 5-6."""
