-- The corpus already loaded from the snapshot file described by the parameters, if it is
-- unchanged: same path ($source_file), size ($size_bytes), modification and change times
-- ($modified_ns, $changed_ns: the change time moves with any rewrite, even one that puts the old
-- modification time back, as `cp -p` does), read by the same statements ($loader), and
-- `corpus` still holds the documents it gave. One row (documents, rejected, loaded_at), or none:
-- read the file.

with

final as (
    select
        corpus_snapshot.documents,
        corpus_snapshot.rejected,
        corpus_snapshot.loaded_at
    from corpus_snapshot
    where
        corpus_snapshot.source_file = $source_file
        and corpus_snapshot.size_bytes = $size_bytes
        and corpus_snapshot.modified_ns = $modified_ns
        and corpus_snapshot.changed_ns = $changed_ns
        and corpus_snapshot.loader = $loader
        and corpus_snapshot.documents = (select count(*) from corpus)
)

select * from final
