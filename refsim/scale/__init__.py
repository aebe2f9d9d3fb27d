"""Many traces, many machines (docs/scale.md): trace lists (:mod:`.inputs`), the grid executor
(:mod:`.executor`: in process, local processes or a Dask cluster, results in one deterministic
order), the sweep/union grids with their pooled summaries (:mod:`.grid`) and ``refsim run
--prompts`` (:mod:`.prompts`)."""
