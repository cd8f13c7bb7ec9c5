"""The goal sampler (autotelic mode): the agent chooses its training goals, by learning progress,
among the goals the social partner has reported (docs/explanation/goal-sampler.md)."""
