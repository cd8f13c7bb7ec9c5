"""In-process training: the loops that tie environment, agent, replay and learner together
(no Ray; the Ray pipeline reuses the same pieces)."""
