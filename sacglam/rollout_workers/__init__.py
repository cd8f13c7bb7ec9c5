"""The rollout side: `recorder.EpisodeRecorder` (vector-env steps -> finished episodes),
`worker.RolloutWorker` (steps environments, samples from pi), and `service.RolloutService` (the
worker wired to inference and replay handles: the Ray rollout-worker actor)."""
