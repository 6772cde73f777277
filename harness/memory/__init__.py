"""Memory policy: waiting for device memory, ROCm's settle, and admission of a runner beside live ones."""
