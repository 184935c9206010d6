"""Execution on Ray: trial actors, the dispatcher, retries, trial batching, and the result sinks."""
