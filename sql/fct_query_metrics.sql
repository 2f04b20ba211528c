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
-- A trace "judged" names labels of its own (relevant_ids or relevance_scores, maybe empty); one
-- that names none but has labels got them from the judgments (warehouse.judgments): annotated
-- the same way (an annotated trace that is not judged was labelled by the judgments).
-- Each label carries its rank in retrieved_ids (found at ingestion, after repeats were dropped:
-- sql/stg_trace_records.sql and engine.keep_first_occurrences), so the id lists are not read here.
-- Fresh labels are the trace's own labels minus those `labels` marks stale for it (only the stale
-- few are read back), so engine.build_labels must have run for these partitions: a trace without
-- label rows counts as all fresh. Each trace is crossed with the requested metrics only, and each
-- row evaluates one formula.
-- Parameters: $start_date, $end_date (partitions, inclusive), $cutoffs (the distinct K values),
-- $metric_names (canonical names to emit), $relevance_level, $exponential_gain.

with

-- labels the corpus made stale, per trace (a few percent of all labels): the fresh labels are
-- the trace's own labels minus these, so the full labels table is not re-aggregated into lists
stale_labels as (
    select
        partition_date,
        trace_id,
        list(doc_id) as stale_ids
    from labels
    where
        partition_date between $start_date and $end_date
        and stale_reason is not null
    group by partition_date, trace_id
),

traces_in_scope as (
    select
        traces.partition_date,
        traces.trace_id,
        traces.query_id,
        traces.segment,
        traces.variant,
        traces.is_judged,
        len(traces.labels) as n_labels_given,
        case
            when stale_labels.stale_ids is null then traces.labels
            else list_filter(
                traces.labels,
                lambda l: not list_contains(stale_labels.stale_ids, l.doc_id)  -- noqa: RF01
            )
        end as fresh
    from traces
    left join stale_labels
        on
            traces.partition_date = stale_labels.partition_date
            and traces.trace_id = stale_labels.trace_id
    where traces.partition_date between $start_date and $end_date
),

per_trace as (
    select
        *,
        (is_judged or n_labels_given > 0)
        and (n_labels_given = 0 or len(fresh) > 0) as is_annotated,
        len(list_filter(fresh, lambda l: l.grade >= $relevance_level)) as n_relevant,
        list_sort(
            list_transform(
                list_filter(
                    fresh,
                    lambda l: l.grade >= $relevance_level and l.rank is not null
                ),
                lambda l: l.rank
            )
        ) as rel_ranks,
        list_transform(
            list_filter(fresh, lambda l: l.rank is not null and l.grade > 0),
            lambda l: struct_pack(
                rank := l.rank,
                gain := case when $exponential_gain then pow(2, l.grade) - 1 else l.grade end
            )
        ) as retrieved_gains,
        list_transform(
            list_sort(list_transform(fresh, lambda l: l.grade), 'DESC'),
            lambda g: case when $exponential_gain then pow(2, g) - 1 else g end
        ) as ideal_gains
    from traces_in_scope
),

-- one row per requested metric: its family and cut-off ($cutoffs holds the same K values)
requested as (
    select
        name as metric,
        split_part(name, '@', 1) as family,
        nullif(split_part(name, '@', 2), '')::integer as k
    from (select unnest($metric_names::varchar[]) as name) as requested_names
    where k is null or list_contains($cutoffs::integer[], k)
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

-- the metric of each row, one formula per family
scored as (
    select
        *,
        case
            when family = 'ndcg'
                then coalesce(
                    list_sum(
                        list_transform(
                            list_filter(retrieved_gains, lambda g: g.rank <= depth),
                            lambda g: g.gain / log2(g.rank + 1)
                        )
                    )
                    / nullif(
                        list_sum(
                            list_transform(  -- noqa: LT01
                                ideal_gains[1:depth], lambda g, i: g / log2(i + 1)
                            )
                        ),
                        0
                    ),
                    0
                )
            when family = 'precision'
                then len(list_filter(rel_ranks, lambda r: r <= depth)) / depth
            when family = 'recall'
                then coalesce(
                    len(list_filter(rel_ranks, lambda r: r <= depth)) / nullif(n_relevant, 0),
                    0
                )
            when family = 'map'
                then coalesce(
                    list_sum(
                        list_transform(  -- noqa: LT01
                            rel_ranks, lambda r, j: case when r <= depth then j / r else 0 end
                        )
                    )
                    / nullif(n_relevant, 0),
                    0
                )
            when family = 'mrr'
                then case when rel_ranks[1] <= depth then 1 / rel_ranks[1] else 0 end
            when family = 'hit_rate'
                then case when list_min(rel_ranks) <= depth then 1 else 0 end
        end as family_value
    from cut
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
        case when is_annotated then family_value::double end as value
    from scored
)

select * from final
