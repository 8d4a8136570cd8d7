"""Reading users' folders into the engine: ``index add|sync`` and ``watch``."""
