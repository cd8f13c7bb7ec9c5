"""Rollout workers (issue 6): each steps a `sacglam.envs.PlaygroundTextVector`, asks the inference
actor for the candidates' distributions, and sends finished episodes to the replay actor.
Not built yet: this package only reserves the name inside `sacglam` (a bare top-level
`rollout_workers` package would collide with other projects' modules in site-packages)."""
