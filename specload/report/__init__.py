"""Analysing recorded runs: the report command, comparisons, other tools' result files, the HTML page
and plots. It reads what ``record/`` wrote and writes nothing back to a run."""
