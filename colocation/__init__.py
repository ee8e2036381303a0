"""Co-location runs: ``jobs.json`` validation, the daemon a run's clients join, client processes,
the run directory.

Entry points: :func:`colocation.config.load_jobs` (validate),
:func:`colocation.preflight.prepare_run` (check the machine) and
:func:`colocation.runner.run_jobs` (run and record). Nothing is imported here, so importing
one module loads only what it needs.
"""
