-- The bounded interval of a mean of per-trace values in [0, 1], as retrieval_pipeline/intervals.py
-- computes it (tests/test_intervals.py holds the two equal); docs/intervals.md says why.
-- Wilson's score interval on an effective sample size: n itself for 0/1 values (Wilson's interval
-- for a proportion), n / phi for values between 0 and 1, phi = sd^2 / (mean (1 - mean)) shrunk
-- towards 1 by one trace's weight and capped at 1. Never leaves [0, 1]; always holds the mean.
--
-- Use, with the mean moved into [0, 1] first (a sum's rounding can put it a hair outside):
--     unit_mean = clamp_unit(mean)
--     effective_traces = interval_effective_traces(n, unit_mean, sd)
--     ci_low = wilson_low(unit_mean, effective_traces, $z), ci_high = wilson_high(...)
-- each a column of its own (a CTE step), so that the expanded macros stay small. All are null
-- when the mean is null (no trace scored).

-- x moved into [0, 1]; null stays null (greatest and least would skip it).
create or replace temp macro clamp_unit(x) as
case
    when x < 0 then 0.0
    when x > 1 then 1.0
    else x
end;

-- The effective number of traces, n / phi, for a mean p in [0, 1] of n values with sample
-- standard deviation sd: n itself when n < 2, sd is unknown, or p is 0 or 1 (every value at
-- that bound: Wilson's interval).
create or replace temp macro interval_effective_traces(n, p, sd) as
n / case
    when n < 2 or sd is null or isnan(sd) or p * (1 - p) <= 0 then 1.0
    else least(1.0, (n * sd * sd / (p * (1 - p)) + 1) / (n + 1))
end;

-- Wilson's bounds for a proportion p in [0, 1] of m (m > 0) at the normal quantile z, kept
-- between p and its end of [0, 1]; null for a null p (greatest and least would skip it).
create or replace temp macro wilson_low(p, m, z) as
case
    when p is not null
        then
            greatest(
                0.0,
                least(
                    p,
                    (p + z * z / (2 * m)) / (1 + z * z / m)
                    - z / (1 + z * z / m) * sqrt(p * (1 - p) / m + z * z / (4 * m * m))
                )
            )
end;

create or replace temp macro wilson_high(p, m, z) as
case
    when p is not null
        then
            least(
                1.0,
                greatest(
                    p,
                    (p + z * z / (2 * m)) / (1 + z * z / m)
                    + z / (1 + z * z / m) * sqrt(p * (1 - p) / m + z * z / (4 * m * m))
                )
            )
end;
