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

cutoffs as (
    select unnest($cutoffs::integer []) as k  -- noqa: LT01
    union all
    select null as k
),

cut as (
    select
        per_trace.*,
        cutoffs.k,
        coalesce(cutoffs.k, 2147483647) as depth
    from per_trace
    cross join cutoffs
),

scored as (
    select
        *,
        len(list_filter(rel_ranks, lambda r: r <= depth)) as hits,
        coalesce(
            list_sum(
                list_transform(
                    list_filter(retrieved_gains, lambda g: g.rank <= depth),
                    lambda g: g.gain / log2(g.rank + 1)
                )
            ),
            0
        ) as dcg,
        coalesce(
            list_sum(
                list_transform(ideal_gains[1:depth], lambda g, i: g / log2(i + 1))  -- noqa: LT01
            ),
            0
        ) as ideal_dcg,
        coalesce(
            list_sum(
                list_transform(  -- noqa: LT01
                    rel_ranks, lambda r, j: case when r <= depth then j / r else 0 end
                )
            ),
            0
        ) as precision_sum
    from cut
),

values_by_family as (
    select
        partition_date,
        trace_id,
        query_id,
        segment,
        variant,
        is_annotated,
        n_relevant,
        k,
        unnest(  -- noqa: AL03
            [
                struct_pack(family := 'ndcg', value := coalesce(dcg / nullif(ideal_dcg, 0), 0)),
                struct_pack(family := 'precision', value := hits / depth),
                struct_pack(
                    family := 'recall', value := coalesce(hits / nullif(n_relevant, 0), 0)
                ),
                struct_pack(
                    family := 'map',
                    value := coalesce(precision_sum / nullif(n_relevant, 0), 0)
                ),
                struct_pack(
                    family := 'mrr',
                    value := case when rel_ranks[1] <= depth then 1 / rel_ranks[1] else 0 end
                ),
                struct_pack(family := 'hit_rate', value := case when hits > 0 then 1 else 0 end)
            ],
            recursive := true
        )
    from scored
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
        family || coalesce('@' || k::varchar, '') as metric,
        case when is_annotated then value::double end as value
    from values_by_family
    where list_contains($metric_names, family || coalesce('@' || k::varchar, ''))
)

select * from final
