"""Where a dashboard's frames come from: every ``RunSource``, and what crosses between it and the UI.

The package is named for the protocol each of its modules implements (``frame.py``: ``RunSource``,
the ``Frame`` it gives, the ``RunControl`` it takes): a run's boundary towards its front ends, in one
place. ``local.py``: a session on the caller's loop; ``engine_process.py``: a session in a process of
its own (what ``specload tui`` ships); ``replay.py``: a record played back; ``static.py``: fixed
data. ``session/`` composes a run and knows nothing of them; ``ui/`` shows any of them. Nothing here
imports Textual.
"""
