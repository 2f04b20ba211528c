"""The A/B comparison's Dagster objects: the `variant_comparison` asset and its flag check."""
