"""pytest plugin glue: one xdist worker per GPU, the gpus(n) marker, per-platform timeouts."""
