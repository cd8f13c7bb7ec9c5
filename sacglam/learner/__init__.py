"""Learners (issues 5-6): SAC-GLAM and PPO-GLAM updates as plain classes, and their Ray actor
wrappers that broadcast the trainable weights to inference.
Not built yet: this package only reserves the name inside `sacglam`."""
