"""How the models run: KV caches, the static decode step, CPU kernels, int8."""
