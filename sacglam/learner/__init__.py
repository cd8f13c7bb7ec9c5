"""Learners: discrete SAC losses as pure functions (`sac_losses`), the SAC-GLAM learner that owns
the optimizers (`sac`), data-parallel gradient averaging (`distributed`), the learner service
(`service`: the Ray learner actor), and PPO-GLAM (`ppo_losses`, `ppo`)."""
