"""Replay: hindsight relabeling with the social partner's goals (`her`), the Arrow episode buffer
with sample-time n-step targets (`buffer`), and `service.ReplayService` (the replay actor:
relabel on insert, batches, snapshots, restore on restart)."""
