-- Every requested metric at every requested cut-off, per trace, in one pass (long form).
--
-- Definitions: trec_eval's, and for the measures of incomplete judgments the sources named in
-- retrieval_pipeline/metrics.py, which states them in full. With R = fresh labels of grade >=
-- $relevance_level, N = fresh labels below it (judged non-relevant), the judged list = the
-- retrieved documents that have a fresh label in rank order, and rel_ranks = the ranks of its
-- relevant ones:
--   precision@K = |rel_ranks <= K| / K          (K even when fewer than K were retrieved)
--   recall@K    = |rel_ranks <= K| / R
--   ap@K        = sum_j [rel_ranks[j] <= K] * j / rel_ranks[j] / R     (map: K = infinity)
--   rr@K        = 1 / rel_ranks[1] when rel_ranks[1] <= K, else 0    (mrr: K = infinity)
--   hit_rate@K  = 1 when any relevant document is in the top K
--   ndcg@K      = sum_{rank <= K} gain(grade) / log2(rank + 1) over the same sum for the K best
--                 grades among all fresh labels; gain = 2^g - 1 ($exponential_gain) or g; like
--                 trec_eval, nDCG uses the grades themselves and ignores the relevance level.
--   judged@K    = |judged ranks <= K| / K       (grade 0 is judged; K even for a short list;
--                 the ranks as served, $judged_only or not)
--   rprec       = |rel_ranks <= R| / R
--   bpref       = sum_j (1 - min(n_j, R) / min(N, R)) / R, n_j = judged non-relevant documents
--                 above the j-th relevant one = its position in the judged list - j; a term
--                 with n_j = 0 is 1 (trec_eval m_bpref.c: with N = 0 bpref is recall)
--   rbp@P       = (1 - P) * sum over judged ranks of min(grade, $gmax) / $gmax * P^(rank - 1)
--   rbp@P_residual = 1 - (1 - P) * sum over judged ranks of P^(rank - 1): the most unjudged
--                 documents (and those past the list's end) could add, each of gain 1
--   err@K       = sum_{rank <= K} stop(rank) / rank * prod of (1 - stop) above it, with
--                 stop = (2^min(grade, $gmax) - 1) / 2^$gmax (0 when unjudged)
-- With $judged_only every rank but judged@K's is the rank in the condensed list (the judged list),
-- so the unjudged retrieved documents are gone before ranks are taken (trec_eval -J); the labels,
-- and so R, N and the ideal DCG, are unchanged.
-- Edge cases: a trace that was not judged, or whose labels are all stale, is unannotated and gets
-- null values; an annotated trace with R = 0 scores 0 on every metric but the graded ones (nDCG,
-- err, rbp: 0 when every grade is 0) and rbp@P_residual (1 - what its judged documents cover).
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
-- $metric_names (canonical names to emit; rbp@P carries its persistence P in its name),
-- $relevance_level, $exponential_gain, $gmax (the top grade, > 0), $judged_only.

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

-- what the requested metrics read beyond the common lists: the judged list in rank order
-- (condensed ranks, bpref's positions, err's cascade), bpref's positions, the judged documents'
-- ranks as served (judged@K) and as scored (rbp@P_residual)
needs as (
    select
        $judged_only or list_has_any(families, ['bpref', 'err']) as ordered,
        list_contains(families, 'bpref') as bpref,
        list_contains(families, 'judged') as served_ranks,
        list_contains(families, 'rbp') as judged_ranks
    from (
        select list_transform($metric_names::varchar[], lambda n: split_part(n, '@', 1)) as families
    ) as requested_families
),

-- the judged list: retrieved documents with a fresh label; `rank` is the rank scored. Where an
-- order is read (needs.ordered) it is sorted by rank and `position` is the place in it (the
-- condensed rank, which $judged_only scores); else it keeps the labels' order, without positions,
-- and sorting is left out (it would cost the common metrics about a tenth more)
judged_lists as (
    select
        *,
        if(
            (select needs.ordered from needs),
            list_transform(  -- noqa: LT01
                list_sort(
                    list_transform(
                        list_filter(fresh, lambda l: l.rank is not null),
                        lambda l: struct_pack(rank := l.rank, grade := l.grade)
                    )
                ),
                lambda l, i: struct_pack(
                    rank := case when $judged_only then i else l.rank end,
                    position := i,
                    grade := l.grade,
                    served := l.rank
                )
            ),
            list_transform(
                list_filter(fresh, lambda l: l.rank is not null),
                lambda l: struct_pack(
                    rank := l.rank, position := null::bigint, grade := l.grade, served := l.rank
                )
            )
        ) as judged_list,
        (is_judged or n_labels_given > 0)
        and (n_labels_given = 0 or len(fresh) > 0) as is_annotated,
        len(list_filter(fresh, lambda l: l.grade >= $relevance_level)) as n_relevant,
        len(list_filter(fresh, lambda l: l.grade < $relevance_level)) as n_nonrelevant,
        list_transform(
            list_sort(list_transform(fresh, lambda l: l.grade), 'DESC'),
            lambda g: case when $exponential_gain then pow(2, g) - 1 else g end
        ) as ideal_gains
    from traces_in_scope
),

-- the lists each formula reads; the measures that need no cut-off (rprec, bpref) are computed
-- here, once per trace, and only when asked for
per_trace as (
    select
        *,
        list_sort(
            list_transform(
                list_filter(judged_list, lambda l: l.grade >= $relevance_level), lambda l: l.rank
            )
        ) as rel_ranks,
        case
            when (select needs.bpref from needs)
                then list_transform(
                    list_filter(judged_list, lambda l: l.grade >= $relevance_level),
                    lambda l: l.position
                )
        end as rel_positions,
        case
            when (select needs.served_ranks from needs)
                then list_transform(judged_list, lambda l: l.served)
        end as served_ranks,
        case
            when (select needs.judged_ranks from needs)
                then list_transform(judged_list, lambda l: l.rank)
        end as judged_ranks,
        list_transform(
            list_filter(judged_list, lambda l: l.grade > 0),
            lambda l: struct_pack(
                rank := l.rank,
                gain := case when $exponential_gain then pow(2, l.grade) - 1 else l.grade end,
                grade := l.grade
            )
        ) as retrieved_gains
    from judged_lists
),

per_trace_scores as (
    select
        *,
        coalesce(
            len(list_filter(rel_ranks, lambda r: r <= n_relevant)) / nullif(n_relevant, 0), 0
        ) as rprec,
        -- the j-th relevant document's position in the judged list, less j, is the number of
        -- judged non-relevant documents above it
        coalesce(
            list_sum(
                list_transform(  -- noqa: LT01
                    rel_positions,
                    lambda pos, j: 1 - coalesce(
                        least(pos - j, n_relevant) / nullif(least(n_nonrelevant, n_relevant), 0),
                        0
                    )
                )
            )
            / nullif(n_relevant, 0),
            0
        ) as bpref
    from per_trace
),

-- one row per requested metric: its family, cut-off and persistence ($cutoffs holds the same K
-- values); rbp@P and rbp@P_residual carry P in the name instead of a cut-off
requested as (
    select
        name as metric,
        case
            when not starts_with(name, 'rbp@') then split_part(name, '@', 1)
            when ends_with(name, '_residual') then 'rbp_residual'
            else 'rbp'
        end as family,
        case
            when not starts_with(name, 'rbp@')
                then nullif(split_part(name, '@', 2), '')::integer
        end as k,
        case
            when starts_with(name, 'rbp@')
                then replace(split_part(name, '@', 2), '_residual', '')::double
        end as persistence
    from (select unnest($metric_names::varchar[]) as name) as requested_names
    where k is null or list_contains($cutoffs::integer[], k)
),

cut as (
    select
        per_trace_scores.partition_date,
        per_trace_scores.trace_id,
        per_trace_scores.query_id,
        per_trace_scores.segment,
        per_trace_scores.variant,
        per_trace_scores.is_annotated,
        per_trace_scores.n_relevant,
        per_trace_scores.rel_ranks,
        per_trace_scores.served_ranks,
        per_trace_scores.judged_ranks,
        per_trace_scores.retrieved_gains,
        per_trace_scores.ideal_gains,
        per_trace_scores.rprec,
        per_trace_scores.bpref,
        requested.metric,
        requested.family,
        requested.persistence,
        coalesce(requested.k, 2147483647) as depth
    from per_trace_scores
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
            when family = 'judged'
                then len(list_filter(served_ranks, lambda r: r <= depth)) / depth
            when family = 'rprec' then rprec
            when family = 'bpref' then bpref
            when family = 'err'
                then coalesce(
                    list_sum(
                        list_transform(  -- noqa: LT01
                            retrieved_gains,
                            lambda g, j: case
                                when g.rank <= depth
                                    then (pow(2, least(g.grade, $gmax)) - 1) / pow(2, $gmax)
                                    / g.rank
                                    * coalesce(
                                        list_product(
                                            list_transform(
                                                retrieved_gains[1:j - 1],
                                                lambda h: 1 - (pow(2, least(h.grade, $gmax)) - 1)
                                                / pow(2, $gmax)
                                            )
                                        ),
                                        1
                                    )
                                else 0
                            end
                        )
                    ),
                    0
                )
            when family = 'rbp'
                then (1 - persistence) * coalesce(
                    list_sum(
                        list_transform(
                            retrieved_gains,
                            lambda g: least(g.grade, $gmax) / $gmax * pow(persistence, g.rank - 1)
                        )
                    ),
                    0
                )
            when family = 'rbp_residual'
                then 1 - (1 - persistence) * coalesce(
                    list_sum(list_transform(judged_ranks, lambda r: pow(persistence, r - 1))), 0
                )
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
