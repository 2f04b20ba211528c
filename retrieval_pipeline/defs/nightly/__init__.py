"""The nightly pipeline's Dagster objects: its assets, their checks and the deploy gate."""
