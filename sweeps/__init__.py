"""The user's side: sweep specs and their validation, the CLI, status and report."""
