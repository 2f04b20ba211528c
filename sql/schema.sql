-- Warehouse tables. Every table carries partition_date: the trace store's day for pipeline runs,
-- the UTC date of the trace's timestamp for `retrieval-pipeline evaluate`. A partition is replaced
-- by deleting its dates and inserting inside one transaction (see engine.replace_partition).

create table if not exists traces (
    partition_date date not null,
    trace_id varchar not null,
    query_id varchar not null,
    served_at timestamptz not null,
    segment varchar not null,
    variant varchar not null,
    label_source varchar,
    retrieved_ids varchar[] not null,  -- rank order, duplicates removed (first kept)
    n_duplicate_ids integer not null,   -- later repeats dropped from retrieved_ids
    is_judged boolean not null,         -- relevant_ids or relevance_scores present
    -- before stale filtering; rank: the document's 1-based position in retrieved_ids, null when
    -- it was not retrieved (found once, at ingestion, so that scoring never reads the id lists)
    labels struct(doc_id varchar, grade double, rank integer)[] not null,
    source_file varchar not null,
    source_line bigint not null,
    n_retrieved integer not null        -- len(retrieved_ids); last, as migrate_label_ranks adds it
);

create table if not exists quarantine (
    partition_date date,                -- null when the record's own date is unknown
    source_file varchar not null,
    source_line bigint not null,
    trace_id varchar,                   -- when it could be read
    field varchar,                      -- the offending field, null for whole-record errors
    reason varchar not null,
    raw_record varchar not null         -- the line (or Parquet row as JSON), kept whole
);

-- An ingestion writing straight into traces and quarantine until it completes (the date it
-- fills; null: the tables were empty when it started). engine.prepare removes what a killed
-- one wrote (engine.undo_interrupted_ingestions).
create table if not exists pending_ingestions (
    partition_date date
);

create table if not exists corpus (
    doc_id varchar not null,
    added_at timestamptz,
    deleted_at timestamptz
);

-- The corpus snapshot's rows that could not be read (sql/stg_corpus_rows.sql), replaced with
-- `corpus`: the document is left out, and the row is kept here with the reason.
create table if not exists corpus_rejects (
    source_file varchar not null,
    source_line bigint not null,        -- the CSV line (the header is line 1) or Parquet row
    doc_id varchar,
    field varchar not null,
    reason varchar not null,
    added_at varchar,                   -- the row's times as given
    deleted_at varchar
);

-- The file `corpus` was loaded from (no row: the table is empty, or was filled before this was
-- kept), as sql/stg_corpus_kept.sql compares it with the store's current snapshot.
create table if not exists corpus_snapshot (
    source_file varchar not null,       -- absolute path
    size_bytes bigint not null,
    modified_ns bigint not null,        -- the file's st_mtime_ns and st_ctime_ns when it was read
    changed_ns bigint not null,
    loader varchar not null,            -- a digest of the statements that read it
    documents bigint not null,          -- rows it gave `corpus`
    rejected bigint not null,           -- rows it gave `corpus_rejects`
    loaded_at timestamptz not null
);

create table if not exists labels (
    partition_date date not null,
    trace_id varchar not null,
    doc_id varchar not null,
    grade double not null,
    stale_reason varchar                -- null: fresh and used for scoring
);

-- The days of `traces`, `labels` and `query_metrics` whose rows a sharded merge left in its
-- shards' Parquet beside the warehouse file (<warehouse file>.merged/<table>/partition_date=D/
-- run=R/, retrieval_pipeline/warehouse/merged_days.py), read under the table's own name: one row
-- per table and day, naming the merge whose files hold them.
create table if not exists merged_parts (
    table_name varchar not null,
    partition_date date not null,
    run varchar not null
);

create table if not exists query_metrics (
    partition_date date not null,
    trace_id varchar not null,
    query_id varchar not null,
    segment varchar not null,
    variant varchar not null,
    is_annotated boolean not null,      -- has fresh labels (or was judged with none)
    n_relevant integer not null,        -- fresh labels with grade >= relevance_level
    metric varchar not null,            -- canonical name: ndcg@10, mrr, precision@5, ...
    value double                        -- null for an unannotated trace
);

-- The sufficient statistics of each partition's segment_metrics (sql/agg_segment_statistics.sql):
-- per segment (and overall, segment '__all__') and variant, for each metric, the traces and the
-- annotated values' count, mean and standard deviation; a sharded day's are the shards' pooled
-- (sql/agg_shard_segment_statistics.sql), kept until the day is written again; those computed
-- from the rows are computed again whenever segment_metrics reads the partition.
create table if not exists segment_statistics (
    partition_date date not null,
    segment varchar not null,
    variant varchar not null,
    metric varchar not null,
    traces bigint not null,
    annotated_traces bigint not null,
    judged_traces bigint not null,      -- annotated by the judgments (no labels of their own)
    n_values bigint not null,           -- annotated values that are numbers
    mean double,                        -- of those; null when there are none
    sd double,                          -- their sample standard deviation; null under two
    not_a_number bigint not null,       -- annotated values that are NaN, in none of the above
    shards integer not null             -- 0: from the partition's rows; else the shards pooled
);

-- A column added since a warehouse may have been written (segment_metrics and regression_report
-- are created on first use, from sql/agg_segment_metrics.sql and sql/rpt_regression.sql): the
-- annotated traces labelled by the judgments.
alter table if exists segment_metrics add column if not exists judged_traces bigint default 0;
alter table if exists regression_report add column if not exists judged_traces bigint default 0;

-- Judgments (retrieval_pipeline.ingest.judgments): one grade per (query, document), from the
-- store's judgments/ folder or `evaluate --judgments`, replaced whole at each load. They label
-- every trace of their query that carries no labels of its own, when its day is ingested
-- (sql/stg_judged_labels.sql).
create table if not exists judgments (
    query_id varchar not null,
    doc_id varchar not null,
    grade double not null,
    judged_at timestamptz,
    label_source varchar not null,
    source_file varchar not null,
    source_line bigint not null        -- the line (Parquet: row) it was read from
);

-- The judgment lines that could not be read, with their reasons, replaced with `judgments`.
create table if not exists judgment_rejects (
    source_file varchar not null,
    source_line bigint not null,
    field varchar,                      -- null for a whole-line problem
    reason varchar not null,
    raw_record varchar not null
);

-- The reranker's stages of a day with RERANKER spans (docs/spans.md, "Stages in the nightly"),
-- written by the `stage_metrics` asset (retrieval_pipeline.warehouse.stages); a day without
-- reranker spans holds no rows. Per stage (reranker_input, reranker), segment and variant
-- (segment `__all__`: overall per variant) and metric, the mean over annotated records.
create table if not exists stage_metrics (
    partition_date date not null,
    stage varchar not null,
    segment varchar not null,
    variant varchar not null,
    metric varchar not null,
    traces bigint not null,             -- records of the stage (one per reranker span)
    annotated_traces bigint not null,   -- of which scored (the metric not null)
    mean double                         -- null without an annotated record
);

-- The reranker's gain over its input per segment (`__all__`: overall) and metric: output - input
-- paired per reranker span (retrieval_pipeline.ab.stages), with its 95% interval.
create table if not exists stage_gains (
    partition_date date not null,
    segment varchar not null,
    metric varchar not null,
    pairs bigint not null,              -- spans annotated in both stages
    input_mean double,
    output_mean double,
    gain double,                        -- null without a pair
    ci_low double,
    ci_high double,
    ci_method varchar
);

-- Per reranker span and metric, its input's and output's value (null when that stage's record
-- is unannotated), with the span's query: what the stage Why splits per query (docs/why.md,
-- "The reranker's stages"). Written with stage_metrics; a day without reranker spans holds none.
create table if not exists stage_query_metrics (
    partition_date date not null,
    span_id varchar not null,           -- the reranker span (its output record's trace_id)
    query_id varchar,
    segment varchar not null,
    variant varchar not null,
    metric varchar not null,
    input_value double,                 -- the reranker's input (reranker_input) scored
    output_value double                 -- its output (reranker) scored
);

-- Documents of a Phoenix store's day graded by both a HUMAN and an LLM document annotation
-- (docs/phoenix.md), per segment and pair of grades: the nightly's agreement (Cohen's kappa),
-- written with the day's traces.
create table if not exists label_agreement (
    partition_date date not null,
    segment varchar not null,
    human_grade double not null,
    llm_grade double not null,
    documents bigint not null
);
