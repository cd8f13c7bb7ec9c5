"""The actor-learner pipeline: the driver (schedule, weight sync, evaluation, checkpoints), the
handles that let the same components run in one process or as Ray actors, Ray placement, and
dashboard metrics. Entry point: `sacglam.pipeline.run.run_pipeline`."""
