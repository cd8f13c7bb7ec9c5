"""The inference side: `server.InferenceServer` (pi over candidates, versioned weights) and its Ray
actor with dynamic micro-batching (`actor.InferenceActor`, `batching.MicroBatcher`)."""
