"""specload: a load tester for LLM inference servers with a live terminal UI.

The package is split so that the core (engine, stats, watch, record, sim, session) never imports
Textual; only ``specload.ui`` does, and the CLI imports it lazily for the TUI.
"""

from __future__ import annotations

__version__ = "0.1.0"
