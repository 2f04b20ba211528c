"""Live monitoring: sampled traces scored one at a time as they arrive, in windows judged by the
sustained-drop rule. Imports only the standard library at start-up (Parquet arrivals are read
through `warehouse`, imported when a Parquet file is met), so `retrieval-pipeline monitor` and the
live sensor share everything here."""
