"""Side effects: the one executor, the apply lock and the engine's entry points."""
