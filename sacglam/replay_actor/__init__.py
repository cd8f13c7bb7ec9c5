"""Replay actor (issues 5-6): the episode replay buffer with social-partner hindsight relabeling
and balanced 50/50 sampling, and its Ray actor wrapper.
Not built yet: this package only reserves the name inside `sacglam`."""
