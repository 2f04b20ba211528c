-- PROPOSAL (bench/proposals/README.md): sql/fct_query_metrics.sql with the cross join over
-- every cut-off and the unnest of all six families replaced by one row per *requested* metric,
-- whose value is computed by a CASE on the family (DuckDB evaluates only the branch a row takes).
-- Same parameters, same output columns and values as the original.
-- Every requested metric at every requested cut-off, per trace, in one pass (long form).
--
-- Definitions: trec_eval's (see retrieval_pipeline/metrics.py for the full statement). With
-- R = fresh labels of grade >= $relevance_level and rel_ranks = ascending ranks of the relevant
-- documents that were retrieved:
--   precision@K = |rel_ranks <= K| / K          (K even when fewer than K were retrieved)
--   recall@K    = |rel_ranks <= K| / R
--   ap@K        = sum_j [rel_ranks[j] <= K] * j / rel_ranks[j] / R     (map: K = infinity)
--   rr@K        = 1 / rel_ranks[1] when rel_ranks[1] <= K, else 0    (mrr: K = infinity)
--   hit_rate@K  = 1 when any relevant document is in the top K
--   ndcg@K      = sum_{rank <= K} gain(grade) / log2(rank + 1) over the same sum for the K best
--                 grades among all fresh labels; gain = 2^g - 1 ($exponential_gain) or g; like
--                 trec_eval, nDCG uses the grades themselves and ignores the relevance level.
-- Edge cases: a trace that was not judged, or whose labels are all stale, is unannotated and gets
-- null values; an annotated trace with R = 0 scores 0 everywhere (nDCG 0 when the ideal DCG is 0).
-- retrieved_ids is already free of repeats (sql/stg_trace_records.sql keeps the first occurrence).
-- Parameters: $start_date, $end_date (partitions, inclusive), $cutoffs (the distinct K values),
-- $metric_names (canonical names to emit), $relevance_level, $exponential_gain.

with

fresh_labels as (
    select
        partition_date,
        trace_id,
        list(struct_pack(doc_id := doc_id, grade := grade)) as fresh
    from labels
    where
        partition_date between $start_date and $end_date
        and stale_reason is null
    group by partition_date, trace_id
),

traces_in_scope as (
    select
        traces.partition_date,
        traces.trace_id,
        traces.query_id,
        traces.segment,
        traces.variant,
        traces.retrieved_ids,
        traces.is_judged,
        len(traces.labels) as n_labels_given,
        coalesce(fresh_labels.fresh, []) as fresh
    from traces
    left join fresh_labels
        on
            traces.partition_date = fresh_labels.partition_date
            and traces.trace_id = fresh_labels.trace_id
    where traces.partition_date between $start_date and $end_date
),

judged as (
    select
        *,
        traces_in_scope.is_judged
        and (n_labels_given = 0 or len(fresh) > 0) as is_annotated,
        list_transform(
            fresh,
            lambda label: struct_pack(
                grade := label.grade, rank := list_position(retrieved_ids, label.doc_id)
            )
        ) as ranked_labels
    from traces_in_scope
),

per_trace as (
    select
        *,
        len(list_filter(ranked_labels, lambda l: l.grade >= $relevance_level)) as n_relevant,
        list_sort(
            list_transform(
                list_filter(
                    ranked_labels,
                    lambda l: l.grade >= $relevance_level and l.rank is not null
                ),
                lambda l: l.rank
            )
        ) as rel_ranks,
        list_transform(
            list_filter(ranked_labels, lambda l: l.rank is not null and l.grade > 0),
            lambda l: struct_pack(
                rank := l.rank,
                gain := case when $exponential_gain then pow(2, l.grade) - 1 else l.grade end
            )
        ) as retrieved_gains,
        list_transform(
            list_sort(list_transform(ranked_labels, lambda l: l.grade), 'DESC'),
            lambda g: case when $exponential_gain then pow(2, g) - 1 else g end
        ) as ideal_gains
    from judged
),

-- one row per requested metric: its family and cut-off ($cutoffs holds the same K values)
requested as (
    select
        name as metric,
        split_part(name, '@', 1) as family,
        nullif(split_part(name, '@', 2), '')::integer as k
    from (select unnest($metric_names::varchar []) as name)
    where k is null or list_contains($cutoffs::integer [], k)
),

cut as (
    select
        per_trace.partition_date,
        per_trace.trace_id,
        per_trace.query_id,
        per_trace.segment,
        per_trace.variant,
        per_trace.is_annotated,
        per_trace.n_relevant,
        per_trace.rel_ranks,
        per_trace.retrieved_gains,
        per_trace.ideal_gains,
        requested.metric,
        requested.family,
        coalesce(requested.k, 2147483647) as depth
    from per_trace
    cross join requested
),

final as (
    select
        partition_date,
        trace_id,
        query_id,
        segment,
        variant,
        is_annotated,
        n_relevant,
        metric,
        case
            when is_annotated then (
                case family
                    when 'ndcg' then coalesce(
                        coalesce(
                            list_sum(
                                list_transform(
                                    list_filter(retrieved_gains, lambda g: g.rank <= depth),
                                    lambda g: g.gain / log2(g.rank + 1)
                                )
                            ),
                            0
                        ) / nullif(
                            coalesce(
                                list_sum(
                                    list_transform(
                                        ideal_gains[1:depth], lambda g, i: g / log2(i + 1)
                                    )
                                ),
                                0
                            ),
                            0
                        ),
                        0
                    )
                    when 'precision'
                        then len(list_filter(rel_ranks, lambda r: r <= depth)) / depth
                    when 'recall' then coalesce(
                        len(list_filter(rel_ranks, lambda r: r <= depth))
                        / nullif(n_relevant, 0),
                        0
                    )
                    when 'map' then coalesce(
                        coalesce(
                            list_sum(
                                list_transform(
                                    rel_ranks,
                                    lambda r, j: case when r <= depth then j / r else 0 end
                                )
                            ),
                            0
                        ) / nullif(n_relevant, 0),
                        0
                    )
                    when 'mrr'
                        then case when rel_ranks[1] <= depth then 1 / rel_ranks[1] else 0 end
                    when 'hit_rate' then case
                        when len(list_filter(rel_ranks, lambda r: r <= depth)) > 0 then 1
                        else 0
                    end
                end
            )::double
        end as value
    from cut
)

select * from final
