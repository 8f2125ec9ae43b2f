"""``specload sweep``: each server configuration launched, measured the same way, compared, in one command.

A sweep is a loop of ``Session`` runs over configurations: ``plan.py`` reads what to run (the launch
command with ``{port}`` and ``{args}``, ``--config``/``--grid``/a TOML plan, the interleaved order of
the repeats); ``state.py`` keeps ``DIR/sweep.json`` (what ran, how each attempt ended, what a resume
keeps); ``loop.py`` runs each attempt as one session (the launch, the crash watch, readiness, the
load and the stop are the session's), waits between them for the port and the GPU memory, retries,
and survives crashes and Ctrl-C; ``cli.py`` is the command. What the runs say together (verdicts,
best configuration per level, capacity, provenance) is ``report/sweep.py``'s, shared with
``specload report DIR``.
"""
