"""CI generators: Buildkite pipelines and GitHub Actions matrices from one platform × suite definition."""
