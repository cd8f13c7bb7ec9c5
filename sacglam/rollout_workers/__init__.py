"""The rollout side: turning environment steps into finished episodes (`recorder.EpisodeRecorder`).
The Ray rollout workers (issue 6) will live here too, wrapping the same pieces."""
