"""Replay: hindsight relabeling with the social partner's goals (`her`) and the Arrow episode
buffer with sample-time n-step targets (`buffer`). The Ray replay actor (issue 6) will wrap them."""
