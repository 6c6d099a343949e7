"""The run store: one folder per training run, written atomically, read back checked.

    schema       what each file of a run folder must hold; every read goes through its checks; the
                 store's vocabularies (ENGINES, IMPORT_KINDS, STATUSES), each defined there once
    migrations   config.json of earlier versions read as today's settings (`stored_config`)
    writer       `RunWriter` writes a run folder as training goes; `WriterLock` says a process writes it
    runs         `load_run` and `list_runs` read run folders back as `Run`s, grouped by seed as `Group`s
    caches       analysis results kept inside a run folder (analysis/), written the store's way

Nothing here imports torch at module level, and nothing is read with pickle.
"""
