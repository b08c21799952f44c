"""Counter-based random draws: every member of a stack in one launch (``kernel``). Adapter:
``foxhunt.env.counter_draws`` (the torch definition it must equal, and the dispatch)."""
