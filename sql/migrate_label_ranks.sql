-- The rows of a warehouse written before labels carried their rank (renamed to
-- `traces_without_ranks` by engine.prepare, which inserts these rows into the new `traces` in
-- the same transaction): each label gets its document's rank in retrieved_ids (null when not
-- retrieved) and each trace its n_retrieved, as ingestion now writes them.

with

final as (
    select
        * replace (
            list_transform(
                labels,
                lambda l: struct_pack(
                    doc_id := l.doc_id,
                    grade := l.grade,
                    rank := list_position(retrieved_ids, l.doc_id)
                )
            ) as labels
        ),
        len(retrieved_ids) as n_retrieved
    from traces_without_ranks
)

select * from final
