"""The engine's core: the contracts, the rule, the step loop, hooks and tree records."""
