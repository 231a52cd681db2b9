"""Relay business logic: typed `<entity>_<action>` functions. Views and tasks call these; nothing else writes.

Sections: dispatch (webhooks in, repository_dispatch out) · callbacks (downstream results, state
machine, sweeper) · check runs and re-runs.
"""

# --- dispatch ----------------------------------------------------------------------------------

# --- callbacks ---------------------------------------------------------------------------------

# --- check runs and re-runs --------------------------------------------------------------------
