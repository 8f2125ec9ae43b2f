"""The dashboard's panels. Each owns its CSS (DEFAULT_CSS, theme variables only) and reads plain data
(a ``StatsSnapshot``, a ``RunnerState``) from reactives bound to the app's sampled state."""
