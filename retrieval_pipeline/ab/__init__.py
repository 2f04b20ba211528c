"""A/B statistics and the comparison model: paired tests, intervals and Holm's adjustment
(`stats`), pairing (`pairing`), the comparison with its verdicts and flag (`compare`), and a
partition day's comparison over its window (`day`). Pure: no DuckDB, no Dagster."""
