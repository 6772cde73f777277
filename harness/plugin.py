"""pytest plugin glue: attribution, ledger per worker, runner fixtures, terminal summary."""
